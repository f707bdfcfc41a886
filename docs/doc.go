// Package docs holds the gateway's documentation: README.md at the top of
// the repository is the front door, and the pages in this folder are the
// reference. The package has no code; its tests keep the pages true to the
// code:
//
//   - every key of the config schema (policies.Schema) is listed in a
//     reference table, and every key a table lists is in the schema (the
//     convention is written at the top of configuration.md);
//   - every `make` target, `go run ./…` path, `gateway` subcommand and flag
//     the pages show exists, the last checked against the built binary;
//   - every "$ gateway …" line shown with its output prints that output;
//   - every test a page names (each claim of guarantees.md names one) exists;
//   - every relative link points at a file that exists, and at a heading
//     of it when it names one.
package docs
