package policies

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// MaxKeysFileBytes bounds what tenants.keys_file holds: the file, or all the
// files of the directory together. At about 90 bytes an entry it is room for
// some 700,000 keys; the bound is what keeps a path replaced by something
// endless from growing the process until it dies.
const MaxKeysFileBytes = 64 << 20

// maxKeysLineBytes bounds one line of a keys file: a digest, a tenant and a
// plan of maxKeysNameBytes each, with room for spaces and a comment.
const maxKeysLineBytes = 1024

// maxKeysNameBytes bounds a tenant or plan name in a keys file.
const maxKeysNameBytes = 128

// keysSource is what one read of tenants.keys_file saw: its files in name
// order (one when the path is a file).
type keysSource struct {
	path   string // as resolved, for messages and the watcher
	files  []keysPart
	digest [32]byte // of every file's name and content, in order
}

// keysPart is one file of a keys source.
type keysPart struct {
	name    string // the path shown in messages
	data    []byte
	modTime time.Time
}

// resolveKeysPath returns tenants.keys_file as a path: a relative one is
// relative to the directory of the configuration file that names it.
func resolveKeysPath(configSource, keysFile string) string {
	if filepath.IsAbs(keysFile) || configSource == "" {
		return keysFile
	}
	return filepath.Join(filepath.Dir(configSource), keysFile)
}

// readKeys reads the keys file at path, or every regular file of the
// directory at path whose name does not start with "." (a Kubernetes
// volume's own entries do), in name order. Symlinks are followed, as a
// Secret mount is made of them. A FIFO or a device is refused without
// reading; all together it holds at most MaxKeysFileBytes.
func readKeys(path string) (*keysSource, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	src := &keysSource{path: path}
	names := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		names = names[:0]
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			full := filepath.Join(path, e.Name())
			if fi, err := os.Stat(full); err == nil && fi.IsDir() {
				continue // a directory inside is not a keys file
			}
			names = append(names, full)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: the directory holds no keys file", path)
		}
	}
	h := sha256.New()
	left := int64(MaxKeysFileBytes)
	for _, name := range names {
		part, err := readKeysPart(name, left)
		if err != nil {
			return nil, err
		}
		left -= int64(len(part.data))
		src.files = append(src.files, part)
		fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(part.data))
		h.Write(part.data)
	}
	h.Sum(src.digest[:0])
	return src, nil
}

// readKeysPart reads one keys file of at most left bytes, as readConfig
// reads a config file.
func readKeysPart(name string, left int64) (keysPart, error) {
	data, modTime, err := readRegular(name, left,
		fmt.Errorf("%s: keys files hold more than %d MiB together, their bound", name, MaxKeysFileBytes>>20))
	if err != nil {
		return keysPart{}, err
	}
	return keysPart{name: name, data: data, modTime: modTime}, nil
}

// parseKeys reads every line of src into a map of digests, adding a problem
// (file, line) for each line it refuses. A line is
//
//	sha256:<64 hex digits> TENANT [PLAN]   # a comment
//
// with the fields apart by spaces or tabs; blank lines and comments are
// skipped. Only digests are accepted: a keys file grants access without
// holding any key. yamlDigests are the digests tenants.keys already lists,
// which a keys file must not list again.
func parseKeys(p *problems, src *keysSource, yamlDigests map[[32]byte]bool) map[[32]byte]Tenant {
	lines := 0
	for _, f := range src.files {
		lines += bytes.Count(f.data, []byte{'\n'}) + 1
	}
	out := make(map[[32]byte]Tenant, lines)
	// Tenants and plans are few beside keys: each name is kept once, and
	// apart from the file's bytes, which are dropped after the load.
	names := map[string]string{}
	intern := func(b []byte) string {
		if s, ok := names[string(b)]; ok { // no allocation for the lookup
			return s
		}
		s := string(b)
		names[s] = s
		return s
	}
	for _, f := range src.files {
		data := f.data
		for n := 1; len(data) > 0; n++ {
			var line []byte
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				line, data = data[:i], data[i+1:]
			} else {
				line, data = data, nil
			}
			sum, tn, msg := parseKeysLine(line, intern)
			place := func() string { return fmt.Sprintf("line %d", n) }
			switch {
			case msg != "":
				p.list = append(p.list, &FieldError{File: f.name, Place: place(), Message: msg})
				continue
			case tn.Name == "":
				continue // blank or a comment
			case yamlDigests[sum]:
				p.list = append(p.list, &FieldError{File: f.name, Place: place(),
					Message: fmt.Sprintf("the key %s%x is also in tenants.keys of %s", DigestPrefix, sum, p.file)})
				continue
			}
			if _, dup := out[sum]; dup {
				file, line := firstKeysLine(src, sum)
				p.list = append(p.list, &FieldError{File: f.name, Place: place(),
					Message: fmt.Sprintf("the key %s%x is listed twice (also %s line %d)", DigestPrefix, sum, file, line)})
				continue
			}
			out[sum] = tn
		}
	}
	return out
}

// firstKeysLine finds the first line of src that holds sum: where a
// duplicate was first listed. Only an error takes this second pass.
func firstKeysLine(src *keysSource, sum [32]byte) (string, int) {
	for _, f := range src.files {
		for n, line := range bytes.Split(f.data, []byte{'\n'}) {
			if s, tn, msg := parseKeysLine(line, func(b []byte) string { return "x" }); msg == "" && tn.Name != "" && s == sum {
				return f.name, n + 1
			}
		}
	}
	return "?", 0
}

// parseKeysLine reads one line. A zero Tenant and no message is a line
// with no entry. Messages never quote the line: a plain key written there by
// mistake is a secret. It allocates nothing but what intern keeps.
func parseKeysLine(line []byte, intern func([]byte) string) (sum [32]byte, tn Tenant, msg string) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > maxKeysLineBytes {
		return sum, tn, fmt.Sprintf("longer than %d bytes", maxKeysLineBytes)
	}
	for i, c := range line {
		if c != '\t' && (c < 0x20 || c > 0x7e) {
			return sum, tn, fmt.Sprintf("byte 0x%02x at column %d: a keys file is printable ASCII, tabs and spaces", c, i+1)
		}
	}
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	var fields [4][]byte
	n := 0
	for len(line) > 0 {
		line = bytes.TrimLeft(line, " \t")
		if len(line) == 0 {
			break
		}
		end := bytes.IndexAny(line, " \t")
		if end < 0 {
			end = len(line)
		}
		if n < len(fields) {
			fields[n] = line[:end]
		}
		n++
		line = line[end:]
	}
	if n == 0 {
		return sum, tn, ""
	}
	d, isDigest := bytes.CutPrefix(fields[0], []byte(DigestPrefix))
	switch {
	case !isDigest:
		return sum, tn, fmt.Sprintf("the first field must be a key's digest, %s<64 hex digits> (gateway key-digest KEY prints it); "+
			"a keys file holds no key itself", DigestPrefix)
	case len(d) != hex.EncodedLen(len(sum)):
		return sum, tn, fmt.Sprintf("the digest is not %s and 64 hex digits", DigestPrefix)
	case n < 2:
		return sum, tn, "a tenant is required after the digest"
	case n > 3:
		return sum, tn, fmt.Sprintf("%d fields; a line is a digest, a tenant and an optional plan (a comment starts with #)", n)
	}
	if _, err := hex.Decode(sum[:], d); err != nil {
		return [32]byte{}, tn, fmt.Sprintf("the digest is not %s and 64 hex digits", DigestPrefix)
	}
	for _, f := range fields[1:n] {
		if len(f) > maxKeysNameBytes {
			return [32]byte{}, tn, fmt.Sprintf("a tenant or plan name is at most %d bytes", maxKeysNameBytes)
		}
	}
	tn.Name = intern(fields[1])
	if n == 3 {
		tn.Plan = intern(fields[2])
	}
	return sum, tn, ""
}

// loadKeys reads (unless pre holds the same path, already read) and parses
// tenants.keys_file into snap, adding problems to p. It returns the source
// that was parsed, or nil when the file could not be read.
func loadKeys(p *problems, path string, pre *keysSource, yaml map[[32]byte]bool) (*keysSource, map[[32]byte]Tenant) {
	src := pre
	if src == nil || src.path != path {
		var err error
		if src, err = readKeys(path); err != nil {
			p.addf("tenants.keys_file", "%v", err)
			return nil, nil
		}
	}
	return src, parseKeys(p, src, yaml)
}

// yamlDigestSet returns the digests of the tenants.keys entries, written
// either way; entries validation refused are left out.
func yamlDigestSet(keys map[string]TenantConfig) map[[32]byte]bool {
	out := make(map[[32]byte]bool, len(keys))
	for key := range keys {
		d, isDigest := digestEntry(key)
		if !isDigest {
			out[sha256.Sum256([]byte(key))] = true
			continue
		}
		var sum [32]byte
		if validDigestHex(d) {
			if _, err := hex.Decode(sum[:], []byte(d)); err == nil {
				out[sum] = true
			}
		}
	}
	return out
}

// sourceDigest is what the watcher compares: the config's bytes alone, or
// with the keys file's.
func sourceDigest(config [32]byte, keys *keysSource) [32]byte {
	if keys == nil {
		return config
	}
	return sha256.Sum256(slices.Concat(config[:], keys.digest[:]))
}
