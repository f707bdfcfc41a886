package policies

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// MaxConfigBytes bounds the size of a configuration file. A real one is a
// few kilobytes; the bound is what keeps a path replaced by something
// endless (a symlink to /dev/zero) from growing the process until it dies.
const MaxConfigBytes = 4 << 20

// configFile is what one read of the configuration file saw.
type configFile struct {
	data    []byte
	digest  [32]byte // of data, and of keys when read
	modTime time.Time
	// keys is the keys file of the snapshot in force, as read along with
	// the config by the watcher; nil otherwise.
	keys *keysSource
}

// sameAs reports whether two reads saw the same file: same bytes, and not
// written in between (the modification time is that of the open file).
func (f configFile) sameAs(o configFile) bool {
	return f.digest == o.digest && len(f.data) == len(o.data) && f.modTime.Equal(o.modTime)
}

// readConfig reads the file at path (symlinks followed: a ConfigMap mount is
// a chain of them) if it is a regular file of at most MaxConfigBytes.
func readConfig(path string) (configFile, error) {
	data, modTime, err := readRegular(path, MaxConfigBytes,
		fmt.Errorf("%s: is larger than %d MiB, the bound on a config file", path, MaxConfigBytes>>20))
	if err != nil {
		return configFile{}, err
	}
	return configFile{data: data, digest: sha256.Sum256(data), modTime: modTime}, nil
}

// readRegular reads the file at path if it is a regular file of at most
// limit bytes, and returns tooLarge if it is larger.
//
// It opens with O_NONBLOCK because open(2) of a FIFO blocks until a writer
// comes, and a reload stuck there would hold up shutdown; on a regular file
// the flag changes nothing. What the path is, is then read from the open
// file (fstat), so nothing can be swapped in between the check and the read.
func readRegular(path string, limit int64, tooLarge error) ([]byte, time.Time, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, err
	}
	if !info.Mode().IsRegular() {
		return nil, time.Time{}, fmt.Errorf("%s: is %s, not a regular file", path, describeFileType(info.Mode()))
	}
	if info.Size() > limit {
		return nil, time.Time{}, tooLarge
	}
	// Sized from Stat, so that a large file is read without regrowing; the
	// read is bounded as well, as the file may grow in between.
	buf := bytes.NewBuffer(make([]byte, 0, info.Size()+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, time.Time{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(buf.Len()) > limit {
		return nil, time.Time{}, tooLarge
	}
	return buf.Bytes(), info.ModTime(), nil
}

func describeFileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0, m&fs.ModeCharDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	default:
		return "a special file"
	}
}
