// Package certstore holds the certificates a TLS listener serves, chosen by
// SNI, and reloads them from their files without a restart: on a change in
// their directories (so a Kubernetes Secret's or certbot's symlink swap
// counts), or when asked. A pair that fails to load keeps the one in force.
//
// It is a process-lifetime resource: cmd/gateway builds one Store, hands its
// TLSConfig to the listeners and runs Run; it never touches the network.
package certstore
