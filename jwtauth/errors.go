package jwtauth

import (
	"errors"

	"github.com/golang-jwt/jwt/v5"
)

// Reason names why a token was refused; it is a metric label and the
// "reason" of a 401, so its values are few and fixed.
type Reason string

// The reasons a token is refused.
const (
	ReasonMalformed     Reason = "malformed"      // not a compact JWS, bad base64 or JSON
	ReasonTooLarge      Reason = "too_large"      // over MaxTokenBytes
	ReasonAlgorithm     Reason = "algorithm"      // alg not in the allowlist (none never is)
	ReasonUnknownKey    Reason = "unknown_kid"    // no key with the token's kid (yet)
	ReasonBadSignature  Reason = "bad_signature"  // signature does not verify
	ReasonExpired       Reason = "expired"        // exp passed (beyond the leeway)
	ReasonNotYetValid   Reason = "not_yet_valid"  // nbf or iat in the future
	ReasonWrongIssuer   Reason = "wrong_issuer"   // iss is not the configured issuer
	ReasonWrongAudience Reason = "wrong_audience" // aud names none of the audiences
	ReasonMissingClaim  Reason = "missing_claim"  // exp, iss, or a claim identity needs
)

// Reasons lists every Reason, for metrics that show each from the start.
var Reasons = []Reason{ReasonMalformed, ReasonTooLarge, ReasonAlgorithm, ReasonUnknownKey, ReasonBadSignature,
	ReasonExpired, ReasonNotYetValid, ReasonWrongIssuer, ReasonWrongAudience, ReasonMissingClaim}

// Error is a refused token: why, in words that never quote the token.
type Error struct {
	Reason Reason
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func refuse(reason Reason, msg string) *Error { return &Error{Reason: reason, Msg: msg} }

// classify turns the jwt library's error into an Error. The order matters:
// the library joins several errors, and a bad signature is reported before
// any claim is looked at.
func classify(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, jwt.ErrTokenMalformed):
		return refuse(ReasonMalformed, "the bearer token is not a well-formed JWT")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return refuse(ReasonBadSignature, "the bearer token's signature does not verify")
	case errors.Is(err, jwt.ErrTokenUnverifiable), errors.Is(err, jwt.ErrInvalidKeyType):
		return refuse(ReasonAlgorithm, "the bearer token's algorithm does not fit its key")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return refuse(ReasonMissingClaim, "the bearer token lacks a required claim (exp, iss or aud)")
	case errors.Is(err, jwt.ErrTokenExpired):
		return refuse(ReasonExpired, "the bearer token has expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return refuse(ReasonNotYetValid, "the bearer token is not valid yet")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return refuse(ReasonWrongIssuer, "the bearer token was issued by another issuer")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return refuse(ReasonWrongAudience, "the bearer token is for another audience")
	default:
		return refuse(ReasonMalformed, "the bearer token cannot be verified")
	}
}
