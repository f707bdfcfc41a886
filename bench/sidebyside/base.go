package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// basePrefix names the targets served by the gateway built from -base:
// base:gateway-local beside gateway-local.
const basePrefix = "base:"

// baseBuildTimeout bounds exporting and building the base revision.
const baseBuildTimeout = 5 * time.Minute

// buildBase exports rev of the repository at root into dir/base-src (git
// archive: the repository and its worktrees are left as they are) and
// builds its gateway into dir/base-gateway. It returns the binary and the
// commit it was built from.
func buildBase(ctx context.Context, goBin, root, dir, rev string) (bin, commit string, err error) {
	ctx, cancel := context.WithTimeout(ctx, baseBuildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--end-of-options", rev+"^{commit}").Output()
	if err != nil {
		return "", "", fmt.Errorf("-base %q: not a commit of %s: %w", rev, root, err)
	}
	commit = strings.TrimSpace(string(out))
	src := filepath.Join(dir, "base-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", "", err
	}
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	untar.Stdin = pipe
	var archiveErr, untarErr strings.Builder
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return "", "", fmt.Errorf("tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return "", "", fmt.Errorf("git archive %s: %w: %s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", "", fmt.Errorf("tar -x of git archive %s: %w: %s", commit, err, untarErr.String())
	}
	bin = filepath.Join(dir, "base-gateway")
	build := exec.CommandContext(ctx, goBin, "build", "-o", bin, "-ldflags", "-X main.version=bench-base-"+commit[:12], "./cmd/gateway")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("building the gateway of %s: %w: %s", commit[:12], err, out)
	}
	return bin, commit, nil
}
