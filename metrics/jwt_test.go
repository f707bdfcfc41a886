package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestJWTRefusalsCountedByReason(t *testing.T) {
	m := New()
	m.TokenReasons([]string{"expired", "wrong_audience", "unknown_kid"})
	m.TokenRefused("expired")
	m.TokenRefused("expired")
	m.TokenRefused("wrong_audience")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`gateway_jwt_refused_total{reason="expired"} 2`,
		`gateway_jwt_refused_total{reason="wrong_audience"} 1`,
		`gateway_jwt_refused_total{reason="unknown_kid"} 0`, // there from TokenReasons
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	var nilM *Metrics
	nilM.TokenReasons([]string{"expired"})
	nilM.TokenRefused("expired") // a nil Metrics records nothing, and does not panic
}
