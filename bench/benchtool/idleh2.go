package main

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// HTTP/2 frame types and flags oneH2GET uses (RFC 9113).
const (
	h2Data      = 0x0
	h2Headers   = 0x1
	h2Settings  = 0x4
	h2GoAway    = 0x7
	h2EndStream = 0x1
	h2EndHeads  = 0x4
	h2Ack       = 0x1
)

// dialH2 opens a TLS connection that negotiated ALPN h2.
func dialH2(d *net.Dialer, addr string) (net.Conn, error) {
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) // #nosec G402: loopback benchmark
	if err != nil {
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("ALPN %q, want h2", p)
	}
	return c, nil
}

// oneH2GET sends the client preface, empty SETTINGS and one GET / on stream
// 1, acknowledges the server's SETTINGS and reads until the answer ends: the
// connection is then idle with no open stream. A small hand-made client,
// so the bench module needs no dependency.
func oneH2GET(c net.Conn, host string) error {
	hdr := []byte{0x82, 0x87, 0x84, 0x41, byte(len(host))} // :method GET, :scheme https, :path /, :authority literal
	hdr = append(hdr, host...)
	out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	out = appendFrame(out, h2Settings, 0, 0, nil)
	out = appendFrame(out, h2Headers, h2EndStream|h2EndHeads, 1, hdr)
	if _, err := c.Write(out); err != nil {
		return err
	}
	br := bufio.NewReaderSize(c, 4096)
	var head [9]byte
	for {
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return err
		}
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		typ, flags, stream := head[3], head[4], binary.BigEndian.Uint32(head[5:])&0x7fffffff
		if _, err := br.Discard(n); err != nil {
			return err
		}
		switch {
		case typ == h2Settings && flags&h2Ack == 0:
			if _, err := c.Write(appendFrame(nil, h2Settings, h2Ack, 0, nil)); err != nil {
				return err
			}
		case typ == h2GoAway:
			return fmt.Errorf("GOAWAY from the server")
		case stream == 1 && (typ == h2Data || typ == h2Headers) && flags&h2EndStream != 0:
			return nil
		}
	}
}

func appendFrame(b []byte, typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}
