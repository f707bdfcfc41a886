package proxy

import "io"

// teeBody passes a body through and keeps a copy of its first max bytes:
// an llm response's, to read its usage once it has passed, and an
// idempotent request's response, to replay it. Past max it keeps nothing
// (what it kept is dropped), and complete says so. It belongs to the one
// goroutine that reads it.
type teeBody struct {
	io.ReadCloser
	max  int64
	buf  []byte
	over bool // more than max bytes passed: buf was dropped
	eof  bool
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.record(p[:n], err)
	return n, err
}

// record keeps b, read with err, as Read does.
func (t *teeBody) record(b []byte, err error) {
	if !t.over {
		if int64(len(t.buf)+len(b)) > t.max {
			t.over, t.buf = true, nil
		} else {
			t.buf = append(t.buf, b...)
		}
	}
	if err == io.EOF {
		t.eof = true
	}
}

// complete reports whether the whole body passed and was kept.
func (t *teeBody) complete() bool { return t.eof && !t.over }
