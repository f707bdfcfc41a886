// Command gateway is a rate-limiting reverse proxy.
//
//	gateway [serve] [-config gateway.yaml]   run the gateway (the default)
//	gateway check -config gateway.yaml       validate a config and show what applies
//	gateway explain -config gateway.yaml URL what the gateway would do with a request
//	gateway key-digest [KEY]...              print API keys as tenants.keys may hold them
//	gateway version                          print the version
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("gateway "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch cmd {
	case "serve":
		config := fs.String("config", "gateway.yaml", "path of the config file")
		logLevel := fs.String("log-level", "info", "debug, info, warn or error")
		if fs.Parse(args) != nil {
			return 2
		}
		if err := serve(ctx, *config, *logLevel, stderr); err != nil {
			fmt.Fprintf(stderr, "gateway: %v\n", err)
			return 1
		}
		return 0
	case "check":
		config := fs.String("config", "gateway.yaml", "path of the config file")
		if fs.Parse(args) != nil {
			return 2
		}
		if err := check(*config, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return 1
		}
		return 0
	case "explain":
		return explainCommand(fs, args, stdout, stderr)
	case "key-digest":
		if fs.Parse(args) != nil {
			return 2
		}
		if err := keyDigest(fs.Args(), stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "gateway key-digest: %v\n", err)
			return 1
		}
		return 0
	case "version":
		fmt.Fprintf(stdout, "gateway %s\n", version)
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		usage(stderr)
		fmt.Fprintf(stderr, "gateway: unknown command %q\n", cmd)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  gateway [serve] [-config gateway.yaml] [-log-level info]   run the gateway (default)
  gateway check -config gateway.yaml                         validate a config, show routes, policies and limits
  gateway explain -config gateway.yaml [-X METHOD] [-H 'Name: value']... [-remote IP:PORT] [-d BODY] [-o text|json] URL
                                                             what the gateway would do with a request (route, client,
                                                             each policy's key, limit and Redis keys), sending nothing;
                                                             exit 0 it reaches the limiter, 2 answered before it, 1 error
  gateway key-digest [KEY]...                                print each key (or each line of stdin) as its digest,
                                                             sha256:<hex>, which tenants.keys accepts in its place
  gateway version                                            print the version
`)
}
