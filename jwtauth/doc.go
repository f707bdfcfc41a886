// Package jwtauth verifies the bearer JWTs that identify callers, against a
// key set that is refreshed in the background.
//
// Signatures, algorithms and registered claims are checked by
// github.com/golang-jwt/jwt/v5, the kept library most Go services use, with
// its parser told the algorithm allowlist, issuer, audiences, leeway and
// clock. JWKS documents are read into keys by github.com/MicahParks/jwkset
// (public keys only, no x5u fetches). Its own HTTP storage and keyfunc/v3's
// rate-limited refresh are not used: they make a request wait (up to a
// minute) for a refresh, and here no request ever waits on the network. A
// KeySet serves the last good keys, refreshes in its Run goroutine, and an
// unknown kid only asks that goroutine for one refresh, at most once per
// cooldown; the token is refused at once.
//
// The package imports nothing else of the gateway: the config model hands
// it plain Rules, and cmd/gateway builds the KeySet once per process.
package jwtauth
