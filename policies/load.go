package policies

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/v2"
	"github.com/mitchellh/copystructure"
)

// EnvPrefix starts every environment variable that overrides a setting:
// GATEWAY_SERVER_LISTEN sets server.listen.
const EnvPrefix = "GATEWAY_"

// Options are the inputs of a load besides the file itself. The zero value
// reads no environment and resolves built-in upstreams to placeholders.
type Options struct {
	// Env holds "NAME=value" pairs as from os.Environ; only the ones
	// starting with EnvPrefix are read. Nil reads none, which keeps tests
	// independent of the machine's environment.
	Env []string
	// Builtins maps a built-in upstream's name ("echo") to the loopback URL
	// it serves on; a non-nil map accepts only its own names ("gateway
	// check" passes Placeholders of the shipped names). Nil resolves every
	// name to a placeholder URL (http://builtin.NAME.invalid).
	Builtins map[string]*url.URL

	// keys is the keys file as the watcher already read it; the load uses
	// it when the config names the same path, so what was compared is what
	// is in force.
	keys *keysSource
}

// Loader is everything needed to load the configuration again: the file and
// the Options. cmd builds one at start and hands it to the Watcher, so every
// reload sees the same environment and built-in upstreams. The zero value has
// no Path and fails to load.
type Loader struct {
	Path string
	// Env and Builtins are as in Options.
	Env      []string
	Builtins map[string]*url.URL
}

// Load reads and compiles l.Path; see the package function Load.
func (l Loader) Load() (*Snapshot, error) { return Load(l.Path, l.options()) }

// Parse compiles data as if it were the content of l.Path.
func (l Loader) Parse(data []byte) (*Snapshot, error) { return Parse(l.Path, data, l.options()) }

func (l Loader) options() Options { return Options{Env: l.Env, Builtins: l.Builtins} }

// Load reads the YAML file at path, applies GATEWAY_ environment overrides
// from opts, validates everything and compiles a Snapshot. Errors about the
// configuration are a *ValidationError listing every problem as
// "file: place: message"; a file that cannot be read is a plain error, and
// so is a path that is not a regular file of at most MaxConfigBytes (a FIFO
// or a device is refused without reading, so Load never blocks on one).
func Load(path string, opts Options) (*Snapshot, error) {
	// The bytes are read once; they are parsed (and digested for the
	// watcher) from memory, so what was checked is what is in force.
	f, err := readConfig(path)
	if err != nil {
		return nil, fmt.Errorf("loading config: %w", err)
	}
	return Parse(path, f.data, opts)
}

// Parse is Load for a configuration already in memory; source names it in
// error messages and in Snapshot.Source. Each call uses a fresh koanf
// instance, so nothing carries over between loads.
func Parse(source string, data []byte, opts Options) (*Snapshot, error) {
	cfg, probs, err := decode(source, data, opts.Env)
	if err != nil {
		return nil, err
	}
	snap, err := build(cfg, probs, opts)
	if err != nil {
		return nil, err
	}
	snap.Digest = sourceDigest(sha256.Sum256(data), snap.keys)
	return snap, nil
}

// Compile fills the defaults into cfg, validates it and compiles a Snapshot,
// without YAML or environment. It is how code that builds a Config in Go (tests
// of other packages, for one) gets a Snapshot. cfg is not modified.
func Compile(source string, cfg Config, opts Options) (*Snapshot, error) {
	cp, err := copystructure.Copy(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: copying config: %w", source, err)
	}
	own, ok := cp.(Config)
	if !ok {
		return nil, fmt.Errorf("%s: copying config: got %T", source, cp)
	}
	return build(&own, &problems{file: source}, opts)
}

// build defaults, validates and compiles cfg. probs may already hold the
// problems of decoding (unknown keys); validation adds its own so that all
// are reported together.
func build(cfg *Config, probs *problems, opts Options) (*Snapshot, error) {
	cfg.ApplyDefaults()
	decoded := len(probs.list)
	validate(probs, cfg, opts.Builtins)
	probs.dropShadowed(decoded)
	var keys *keysSource
	var fileKeys map[[32]byte]Tenant
	if cfg.Tenants.KeysFile != "" && len(probs.list) == 0 {
		keys, fileKeys = loadKeys(probs, resolveKeysPath(probs.file, cfg.Tenants.KeysFile), opts.keys, yamlDigestSet(cfg.Tenants.Keys))
	}
	if err := probs.err(); err != nil {
		return nil, err
	}
	snap, err := compile(cfg, opts.Builtins)
	if err != nil {
		return nil, fmt.Errorf("%s: compiling config: %w", probs.file, err)
	}
	if j := snap.Tenants.JWT; j != nil && j.KeysFile != "" {
		j.KeysFile = resolveKeysPath(probs.file, j.KeysFile)
	}
	if keys != nil {
		// The path and digest only: the file's bytes are not kept.
		snap.Tenants.KeysFile, snap.keys = keys.path, &keysSource{path: keys.path, digest: keys.digest}
		for sum, tn := range snap.Tenants.Digests {
			fileKeys[sum] = tn
		}
		snap.Tenants.Digests = fileKeys
	}
	snap.Source = probs.file
	snap.Warnings = probs.warnings
	return snap, nil
}

// decode turns YAML plus environment into a Config. Unknown keys and
// environment variables that match nothing are returned in the problems, to
// be reported with validation's; wrong types are returned as an error at once.
func decode(source string, data []byte, environ []string) (*Config, *problems, error) {
	k := koanf.New(".")
	if err := k.Load(bytesProvider(data), yaml.Parser()); err != nil {
		return nil, nil, &ValidationError{Errors: []*FieldError{{File: source, Message: fmt.Sprintf("parsing yaml: %v", err)}}}
	}

	probs := &problems{file: source}
	ov := newEnvOverlay(probs, k.Raw())
	if err := k.Load(ov.provider(environ), nil, koanf.WithMergeFunc(mergeEnv)); err != nil {
		return nil, nil, fmt.Errorf("%s: applying environment: %w", source, err)
	}
	probs.envPlaces = ov.places

	checkStrict(probs, k.Raw())

	var cfg Config
	dc := &mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(durationHook, mapstructure.TextUnmarshallerHookFunc()),
		// Unknown keys are already in probs, with their places and a
		// suggestion; decoding skips them so validation can run too.
		ErrorUnused: len(probs.list) == 0,
		TagName:     "koanf",
	}
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: dc}); err != nil && len(probs.typePlaces) == 0 {
		// checkStrict reports every type problem it knows of with its place
		// (decoding then leaves those fields zero and goes on, so validation
		// still reports everything else); this is the net for anything it
		// missed.
		return nil, nil, translateDecodeError(probs, err)
	}
	return &cfg, probs, nil
}

// durationHook accepts "1m", "500ms" and a bare 0 for time.Duration fields.
// A bare number other than 0 is rejected: "5" could mean seconds or
// nanoseconds, and guessing wrong silently breaks a limit.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() {
		return data, nil
	}
	switch v := data.(type) {
	case string:
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("invalid duration %q", v)
		}
		return d, nil
	case time.Duration:
		return v, nil
	}
	if isZeroNumber(data) {
		return time.Duration(0), nil
	}
	return nil, fmt.Errorf("must be a duration with a unit, like \"1s\" or \"500ms\" (got %v)", data)
}

func translateDecodeError(probs *problems, err error) error {
	var walk func(error)
	walk = func(e error) {
		if multi, ok := e.(interface{ Unwrap() []error }); ok {
			for _, inner := range multi.Unwrap() {
				walk(inner)
			}
			return
		}
		var de *mapstructure.DecodeError
		if errors.As(e, &de) {
			probs.add(de.Name(), de.Unwrap().Error())
			return
		}
		probs.add("", e.Error())
	}
	walk(err)
	return probs.err()
}

// bytesProvider hands koanf bytes that were already read, so the content
// that is parsed is exactly the content whose digest the watcher compares.
type bytesProvider []byte

// ReadBytes returns the bytes for koanf's YAML parser.
func (b bytesProvider) ReadBytes() ([]byte, error) { return b, nil }

// Read is not supported: the bytes are always parsed.
func (b bytesProvider) Read() (map[string]any, error) {
	return nil, errors.New("bytes provider needs a parser")
}
