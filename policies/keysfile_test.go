package policies

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// keysYAML is minimalYAML with a keys file and one key of its own.
func keysYAML(keysFile string) string {
	return minimalYAML + fmt.Sprintf(`tenants:
  keys_file: %q
  keys:
    %s: {tenant: yaml-tenant}
`, keysFile, KeyDigest("yaml-key"))
}

// writeConfigAndKeys writes gateway.yaml and keys beside it in a fresh
// directory and returns gateway.yaml's path.
func writeConfigAndKeys(t *testing.T, keys string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tenants.keys"), keys)
	path := filepath.Join(dir, "gateway.yaml")
	writeFile(t, path, keysYAML("tenants.keys"))
	return path
}

func TestKeysFileLoads(t *testing.T) {
	keys := "# digest tenant plan\n" +
		KeyDigest("k1") + " acme pro\n" +
		"\n" +
		"\t" + DigestPrefix + strings.ToUpper(KeyDigest("k2")[len(DigestPrefix):]) + "\tglobex   # upper-case hex, tabs, a comment\r\n" +
		KeyDigest("k3") + " acme pro" // the last line without a newline
	path := writeConfigAndKeys(t, keys)
	snap, err := Load(path, Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	for _, tt := range []struct {
		key, tenant, plan string
		ok                bool
	}{
		{"k1", "acme", "pro", true},
		{"k2", "globex", "", true},
		{"k3", "acme", "pro", true},
		{"yaml-key", "yaml-tenant", "", true},
		{"k4", "", "", false},
		{"", "", "", false},
	} {
		tn, ok := snap.Tenants.Lookup(tt.key)
		if ok != tt.ok || tn.Name != tt.tenant || tn.Plan != tt.plan {
			t.Errorf("Lookup(%q) = %+v, %v; want {%s %s}, %v", tt.key, tn, ok, tt.tenant, tt.plan, tt.ok)
		}
	}
	if got, want := snap.Tenants.KeysFile, filepath.Join(filepath.Dir(path), "tenants.keys"); got != want {
		t.Errorf("KeysFile = %q, want %q (relative to the config's directory)", got, want)
	}
	if !snap.Tenants.HasTenant("globex") {
		t.Error("HasTenant(globex) = false, want true")
	}
}

func TestKeysFileRefusesBadLines(t *testing.T) {
	d1 := KeyDigest("k1")
	for _, tt := range []struct {
		name, line, want string
	}{
		{"plain key", "sk-live-secret acme", "the first field must be a key's digest"},
		{"short digest", "sha256:abcd acme", "the digest is not sha256: and 64 hex digits"},
		{"not hex", "sha256:" + strings.Repeat("g", 64) + " acme", "the digest is not sha256: and 64 hex digits"},
		{"no tenant", d1, "a tenant is required after the digest"},
		{"no tenant, comment", d1 + " # acme", "a tenant is required after the digest"},
		{"four fields", d1 + " acme pro extra", "4 fields"},
		{"NUL byte", d1 + " ac\x00me", "byte 0x00 at column 75"},
		{"escape sequence", d1 + " \x1b[31macme", "byte 0x1b at column 73"},
		{"non-ASCII", d1 + " acmé", "byte 0xc3 at column 76"},
		{"lone CR inside", d1 + " ac\rme", "byte 0x0d at column 75"},
		{"long line", d1 + " " + strings.Repeat("a", maxKeysLineBytes), "longer than 1024 bytes"},
		{"long tenant", d1 + " " + strings.Repeat("a", maxKeysNameBytes+1), "at most 128 bytes"},
		{"long plan", d1 + " acme " + strings.Repeat("p", maxKeysNameBytes+1), "at most 128 bytes"},
		{"prefix only", "sha256: acme", "the digest is not"},
		{"prefix case", "SHA256:" + d1[len(DigestPrefix):] + " acme", "the first field must be a key's digest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The bad line is the third: the message must name it.
			keys := "# tenants\n" + KeyDigest("good") + " acme\n" + tt.line + "\n"
			path := writeConfigAndKeys(t, keys)
			_, err := Load(path, Options{})
			if err == nil {
				t.Fatalf("Load: got no error, want one naming line 3")
			}
			keysPath := filepath.Join(filepath.Dir(path), "tenants.keys")
			want := keysPath + ": line 3: "
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error\n%v\nwant it to contain %q and %q", err, want, tt.want)
			}
			if strings.Contains(err.Error(), "sk-live-secret") {
				t.Errorf("the error repeats the plain key:\n%v", err)
			}
		})
	}
}

func TestKeysFileRefusesDuplicates(t *testing.T) {
	t.Run("twice in the file", func(t *testing.T) {
		path := writeConfigAndKeys(t, KeyDigest("k1")+" a\n"+KeyDigest("k2")+" b\n"+KeyDigest("k1")+" c\n")
		_, err := Load(path, Options{})
		want := fmt.Sprintf("line 3: the key %s is listed twice (also %s line 1)", KeyDigest("k1"), filepath.Join(filepath.Dir(path), "tenants.keys"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error containing %q", err, want)
		}
	})
	t.Run("upper and lower case hex", func(t *testing.T) {
		d := KeyDigest("k1")
		path := writeConfigAndKeys(t, d+" a\n"+DigestPrefix+strings.ToUpper(d[len(DigestPrefix):])+" b\n")
		if _, err := Load(path, Options{}); err == nil || !strings.Contains(err.Error(), "line 2: the key") {
			t.Errorf("got %v, want line 2 refused as a duplicate", err)
		}
	})
	t.Run("in the file and in tenants.keys", func(t *testing.T) {
		path := writeConfigAndKeys(t, KeyDigest("yaml-key")+" other\n")
		_, err := Load(path, Options{})
		want := "line 1: the key " + KeyDigest("yaml-key") + " is also in tenants.keys of " + path
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error containing %q", err, want)
		}
	})
}

func TestKeysFileDirectory(t *testing.T) {
	dir := t.TempDir()
	keysDir := filepath.Join(dir, "keys")
	// The layout of a Kubernetes volume: files are symlinks through ..data
	// into a timestamped directory, which is skipped, as are dot files.
	data := filepath.Join(keysDir, "..2026_12_03_10_00_00.000000001")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(data, "part-1.keys"), KeyDigest("k1")+" acme\n")
	writeFile(t, filepath.Join(data, "part-2.keys"), KeyDigest("k2")+" globex gold\n")
	if err := os.Symlink(filepath.Base(data), filepath.Join(keysDir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"part-1.keys", "part-2.keys"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(keysDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(keysDir, ".hidden"), "not a keys line\n")
	path := filepath.Join(dir, "gateway.yaml")
	writeFile(t, path, keysYAML("keys"))
	snap, err := Load(path, Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	for key, want := range map[string]Tenant{"k1": {Name: "acme"}, "k2": {Name: "globex", Plan: "gold"}} {
		if got, ok := snap.Tenants.Lookup(key); !ok || got != want {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v", key, got, ok, want)
		}
	}

	// A duplicate across two files names both.
	writeFile(t, filepath.Join(data, "part-3.keys"), "# more\n"+KeyDigest("k1")+" other\n")
	if err := os.Symlink(filepath.Join("..data", "part-3.keys"), filepath.Join(keysDir, "part-3.keys")); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, Options{})
	want := filepath.Join(keysDir, "part-3.keys") + ": line 2: the key " + KeyDigest("k1") + " is listed twice (also " + filepath.Join(keysDir, "part-1.keys") + " line 1)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error containing %q", err, want)
	}

	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, keysYAML("empty"))
	if _, err := Load(path, Options{}); err == nil || !strings.Contains(err.Error(), "tenants.keys_file: "+empty+": the directory holds no keys file") {
		t.Errorf("an empty directory: got %v, want it refused", err)
	}
}

func TestKeysFileRefusesWhatIsNotAKeysFile(t *testing.T) {
	dir := t.TempDir()
	fifo, zero := specialFiles(t, dir, "")
	// Sparse: its size is over the bound without writing it.
	big := filepath.Join(dir, "big")
	writeFile(t, big, "")
	if err := os.Truncate(big, MaxKeysFileBytes+1); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, path, want string }{
		{"fifo", fifo, fifo + ": is a named pipe, not a regular file"},
		{"symlink to /dev/zero", zero, zero + ": is a device, not a regular file"},
		{"over the bound", big, big + ": keys files hold more than 64 MiB together, their bound"},
		{"missing", filepath.Join(dir, "missing"), "no such file or directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "gateway.yaml")
			writeFile(t, path, keysYAML(tt.path))
			err := loadWithin(t, path)
			if err == nil || !strings.Contains(err.Error(), path+": tenants.keys_file: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming tenants.keys_file and containing %q", err, tt.want)
			}
		})
	}
}

// TestKeysFileManyKeys loads 100,000 keys: more than a config file can hold
// (MaxConfigBytes), which is what the keys file is for.
func TestKeysFileManyKeys(t *testing.T) {
	const n = 100_000
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s tenant-%d plan-%d\n", KeyDigest(fmt.Sprint("key-", i)), i%5000, i%3)
	}
	if b.Len() <= MaxConfigBytes {
		t.Fatalf("the keys take %d bytes, want more than a config file's bound %d", b.Len(), MaxConfigBytes)
	}
	path := writeConfigAndKeys(t, b.String())
	snap, err := Load(path, Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := len(snap.Tenants.Digests); got != n+1 {
		t.Errorf("got %d digests, want %d", got, n+1)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		tn, ok := snap.Tenants.Lookup(fmt.Sprint("key-", i))
		if want := (Tenant{Name: fmt.Sprint("tenant-", i%5000), Plan: fmt.Sprint("plan-", i%3)}); !ok || tn != want {
			t.Errorf("Lookup(key-%d) = %+v, %v; want %+v", i, tn, ok, want)
		}
	}
}

func TestWatchKeysFile(t *testing.T) {
	path := writeConfigAndKeys(t, KeyDigest("k1")+" acme\n")
	keysPath := filepath.Join(filepath.Dir(path), "tenants.keys")
	h := newHarness(t, path, 20*time.Millisecond)
	h.run(t)

	// A new key, the config untouched: reloaded.
	replaceFile(t, keysPath, KeyDigest("k1")+" acme\n"+KeyDigest("k2")+" globex\n")
	ev := h.nextApplied(t)
	if _, ok := ev.Snapshot.Tenants.Lookup("k2"); !ok {
		t.Fatalf("after adding k2 to the keys file: k2 unknown")
	}

	// A bad line: refused with file and line, the last good keys kept.
	replaceFile(t, keysPath, KeyDigest("k3")+" acme\nsk-plain globex\n")
	ev = h.next(t)
	if ev.Err == nil || !strings.Contains(ev.Err.Error(), keysPath+": line 2: the first field must be a key's digest") {
		t.Fatalf("bad keys file: got %v, want the error naming %s line 2", ev.Err, keysPath)
	}
	cur := h.cur.Load()
	if _, ok := cur.Tenants.Lookup("k2"); !ok {
		t.Error("after a bad keys file: k2 unknown, want the last good keys kept")
	}
	if _, ok := cur.Tenants.Lookup("k3"); ok {
		t.Error("after a bad keys file: k3 known, want nothing of the bad file applied")
	}
	if !strings.Contains(h.logs.String(), "line 2") {
		t.Errorf("the failed reload is not logged with its line:\n%s", h.logs.String())
	}

	// Removed: refused, naming the file; put back fixed: applied.
	if err := os.Remove(keysPath); err != nil {
		t.Fatal(err)
	}
	ev = h.next(t)
	if ev.Err == nil || !strings.Contains(ev.Err.Error(), "tenants.keys_file") {
		t.Fatalf("keys file removed: got %v, want an error naming tenants.keys_file", ev.Err)
	}
	replaceFile(t, keysPath, KeyDigest("k3")+" acme\n")
	ev = h.nextApplied(t)
	if _, ok := ev.Snapshot.Tenants.Lookup("k3"); !ok {
		t.Error("after the keys file was fixed: k3 unknown")
	}
}

// TestReloadSeesKeysFileChange: Reload (SIGHUP) compares the keys file's
// content too, not only the config's.
func TestReloadSeesKeysFileChange(t *testing.T) {
	path := writeConfigAndKeys(t, KeyDigest("k1")+" acme\n")
	keysPath := filepath.Join(filepath.Dir(path), "tenants.keys")
	h := newHarness(t, path, 20*time.Millisecond)
	if err := h.w.Reload(); err != nil {
		t.Fatal(err)
	}
	if ev := h.next(t); !ev.Unchanged {
		t.Fatalf("nothing changed: got %+v, want Unchanged", ev)
	}
	writeFile(t, keysPath, KeyDigest("k2")+" globex\n")
	if err := h.w.Reload(); err != nil {
		t.Fatalf("Reload after a keys change: %v", err)
	}
	if _, ok := h.cur.Load().Tenants.Lookup("k2"); !ok {
		t.Error("after Reload: k2 unknown, want the new keys file in force")
	}
	if _, ok := h.cur.Load().Tenants.Lookup("k1"); ok {
		t.Error("after Reload: k1 still known, want it gone with its line")
	}
}

func FuzzParseKeysLine(f *testing.F) {
	f.Add([]byte(KeyDigest("k") + " acme pro"))
	f.Add([]byte("sk-plain acme"))
	f.Add([]byte("\t" + KeyDigest("k") + "\tacme # c\r"))
	f.Add([]byte("sha256:" + strings.Repeat("f", 64)))
	f.Fuzz(func(t *testing.T, line []byte) {
		sum, tn, msg := parseKeysLine(line, func(b []byte) string { return string(b) })
		if msg != "" {
			if tn != (Tenant{}) {
				t.Errorf("refused line %q gave a tenant %+v", line, tn)
			}
			return
		}
		if tn.Name == "" {
			if tn.Plan != "" || sum != [32]byte{} {
				t.Errorf("an empty line %q gave %x %+v", line, sum, tn)
			}
			return
		}
		// An accepted entry's digest is written in the line, and its names
		// are printable fields of it.
		if !strings.Contains(strings.ToLower(string(line)), fmt.Sprintf("%s%x", DigestPrefix, sum)) {
			t.Errorf("line %q: digest %x is not in it", line, sum)
		}
		for _, s := range []string{tn.Name, tn.Plan} {
			if strings.ContainsAny(s, " \t#\r\n\x00") || len(s) > maxKeysNameBytes {
				t.Errorf("line %q: name %q is not a field", line, s)
			}
		}
	})
}

// BenchmarkLoadKeysFile loads a config whose keys file holds 100,000
// digests: what a start or a reload with that many tenants costs.
func BenchmarkLoadKeysFile(b *testing.B) {
	var sb strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&sb, "%s tenant-%d plan-%d\n", KeyDigest(fmt.Sprint("key-", i)), i, i%3)
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tenants.keys"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(keysYAML("tenants.keys")), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Load(path, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
