package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ratelimit-gateway/gateway/policies"
)

// stdin is what key-digest reads keys from when none is given as an
// argument; keys typed there stay out of the shell's history.
var stdin io.Reader = os.Stdin

// keyDigest prints, one a line, the digest of each key in args, or of each
// line of in when args is empty: what tenants.keys accepts in place of the
// key. The keys themselves are never printed.
func keyDigest(args []string, in io.Reader, w io.Writer) error {
	if len(args) > 0 {
		for _, k := range args {
			if err := printDigest(w, k); err != nil {
				return err
			}
		}
		return nil
	}
	sc := bufio.NewScanner(in)
	n := 0
	for sc.Scan() {
		if err := printDigest(w, sc.Text()); err != nil {
			return err
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading keys: %w", err)
	}
	if n == 0 {
		return errors.New("no key given (pass it as an argument or one a line on stdin)")
	}
	return nil
}

// printDigest prints key's digest. Surrounding spaces and a carriage return
// are not part of a key, as the proxy reads it.
func printDigest(w io.Writer, key string) error {
	key = strings.TrimSpace(key)
	if key == "" {
		return errors.New("an empty key has no digest")
	}
	_, err := fmt.Fprintln(w, policies.KeyDigest(key))
	return err
}
