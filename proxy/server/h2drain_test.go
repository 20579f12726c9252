package server

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The drain of a stream answered before its request body ended
// (h2drain.go): the frame sequence a client still uploading needs to read
// the answer (curl 7.88 loses it when RST_STREAM comes in the answer's
// write).

// drainTune sets the body limit to 1000 bytes (the proxy answers 413 to a
// longer declared body, without reading it) and the drain's bounds; early
// (if set) replaces the proxy as the handler.
func drainTune(t *testing.T, bytes int64, delay time.Duration, early http.HandlerFunc) func(*h2Server) {
	return func(s *h2Server) {
		ps, ok := s.handler.(*Server)
		if !ok {
			t.Errorf("the HTTP/2 server's handler is a %T, want *Server", s.handler)
			return
		}
		ps.maxBody = 1000
		s.drainBytes, s.drainDelay = bytes, delay
		if early != nil {
			s.handler = early
		}
	}
}

// readAnswerEnd reads stream 1's answer up to END_STREAM: its status. No
// RST_STREAM comes first, and no GOAWAY: a 413 ends its stream alone.
func readAnswerEnd(t *testing.T, c *h2raw) int {
	t.Helper()
	status := 0
	for {
		switch f := c.next().(type) {
		case *http2.MetaHeadersFrame:
			if status == 0 {
				status, _ = strconv.Atoi(f.PseudoValue("status"))
			}
			if f.StreamEnded() {
				return status
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				return status
			}
		default:
			t.Fatalf("%v before the answer's END_STREAM", f)
		}
	}
}

// A 413 before the body: after the answer's END_STREAM each DATA frame the
// client goes on sending is credited back on the stream (WINDOW_UPDATE)
// until the drain's byte bound, then RST_STREAM(NO_ERROR); never in the
// answer's write.
func TestSluiceH2DrainByBytes(t *testing.T) {
	_, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), drainTune(t, 4*16384, time.Hour, nil))
	c := dialH2(t, addr, pool)
	c.request(1, "POST", "/echo", false, "content-length", "100000000")
	if st := readAnswerEnd(t, c); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", st)
	}
	chunk := make([]byte, 16384)
	for i := 0; i < 3; i++ {
		if err := c.fr.WriteData(1, false, chunk); err != nil {
			t.Fatal(err)
		}
		wu, ok := c.next().(*http2.WindowUpdateFrame)
		if !ok || wu.StreamID != 1 || wu.Increment != 16384 {
			t.Fatalf("DATA %d drained: got %v, want WINDOW_UPDATE stream 1 +16384", i, wu)
		}
	}
	if err := c.fr.WriteData(1, false, chunk); err != nil {
		t.Fatal(err)
	}
	if code := c.expectReset(1); code != http2.ErrCodeNo {
		t.Fatalf("RST_STREAM %v, want NO_ERROR", code)
	}
}

// A handler answering early without reading the body: with no DATA coming,
// RST_STREAM(NO_ERROR) comes after the drain's delay; the connection goes
// on serving.
func TestSluiceH2DrainByTime(t *testing.T) {
	early := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "early") }
	const delay = 200 * time.Millisecond
	_, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), drainTune(t, 1<<30, delay, early))
	c := dialH2(t, addr, pool)
	// The drain's timer starts when the answer is queued, after the request
	// arrived: the reset comes at least the delay after the request was
	// sent. (Timed from the answer's read, a client stalled under load saw
	// it 24ms later.)
	start := time.Now()
	c.request(1, "POST", "/echo", false)
	if st := readAnswerEnd(t, c); st != 200 {
		t.Fatalf("status %d, want 200", st)
	}
	if code := c.expectReset(1); code != http2.ErrCodeNo {
		t.Fatalf("RST_STREAM %v, want NO_ERROR", code)
	}
	if d := time.Since(start); d < delay {
		t.Fatalf("RST_STREAM %v after the request, want after the drain delay %v", d, delay)
	}
	c.request(3, "GET", "/", true)
	if st, body := c.answer(3); st != 200 || body != "early" {
		t.Fatalf("stream 3: %d %q, want 200 early", st, body)
	}
}

// A client that ends its body while its stream drains (a last DATA, or
// trailers) gets no RST_STREAM, and the 413 leaves the connection to the
// other streams: no GOAWAY, the next stream is answered.
func TestSluiceH2DrainClientEnds(t *testing.T) {
	for _, trailers := range []bool{false, true} {
		t.Run(fmt.Sprintf("trailers=%v", trailers), func(t *testing.T) {
			_, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), drainTune(t, 1<<30, time.Hour, nil))
			c := dialH2(t, addr, pool)
			c.request(1, "POST", "/echo", false, "content-length", "100000000")
			if st := readAnswerEnd(t, c); st != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413", st)
			}
			var err error
			if trailers {
				c.hbuf.Reset()
				_ = c.enc.WriteField(hpack.HeaderField{Name: "x-trailer", Value: "v"})
				err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.hbuf.Bytes(), EndStream: true, EndHeaders: true})
			} else {
				err = c.fr.WriteData(1, true, []byte("end"))
			}
			if err != nil {
				t.Fatal(err)
			}
			// The server reads frames in order: an RST_STREAM for the end
			// of the body would come before the PING's answer.
			ping := [8]byte{'d', 'r', 'a', 'i', 'n', 'e', 'n', 'd'}
			if err := c.fr.WritePing(false, ping); err != nil {
				t.Fatal(err)
			}
			for done := false; !done; {
				switch f := c.next().(type) {
				case *http2.PingFrame:
					done = f.IsAck() && f.Data == ping
				case *http2.RSTStreamFrame:
					t.Fatalf("RST_STREAM %v on stream %d after the client ended its body", f.ErrCode, f.StreamID)
				case *http2.GoAwayFrame:
					t.Fatalf("GOAWAY %v after a 413", f.ErrCode)
				}
			}
			c.request(3, "GET", "/", true)
			if st, _ := c.answer(3); st != 200 {
				t.Fatalf("stream 3 after the 413: %d, want 200", st)
			}
		})
	}
}
