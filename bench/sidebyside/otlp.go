package main

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// otlpSink is the traced gateway's OTLP/HTTP collector: it reads each
// export and answers success (an empty ExportTraceServiceResponse is zero
// bytes of protobuf), so the gateway pays for sampling, building and
// sending spans, and nothing waits on a real collector.
type otlpSink struct {
	url     string
	srv     *http.Server
	exports atomic.Int64
}

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s.exports.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go s.srv.Serve(ln) // ends when close closes the server
	return s, nil
}

func (s *otlpSink) close() { s.srv.Close() }

// close stops what the lab runs in this process (the OTLP sink) and the
// Redis servers.
func (l *lab) close() {
	if l.otlp != nil {
		l.otlp.close()
	}
	l.tb.Close()
}
