package limiter

import (
	"testing"
	"time"
)

func TestFallbackLimit(t *testing.T) {
	tests := []struct {
		name  string
		alg   Algorithm
		lim   Limit
		share float64
		want  Limit
	}{
		{"a third of a gcra limit", GCRA, Limit{Rate: 30, Period: time.Minute, Burst: 60}, 0.34, Limit{Rate: 10, Period: time.Minute, Burst: 20}},
		{"gcra without burst uses the rate", GCRA, Limit{Rate: 30, Period: time.Minute}, 0.5, Limit{Rate: 15, Period: time.Minute, Burst: 15}},
		{"windows use the rate as quota", SlidingWindow, Limit{Rate: 100, Period: time.Hour}, 0.29, Limit{Rate: 29, Period: time.Hour, Burst: 29}},
		{"never below one", FixedWindow, Limit{Rate: 2, Period: time.Second}, 0.1, Limit{Rate: 1, Period: time.Second, Burst: 1}},
		{"zero share means the whole limit", GCRA, Limit{Rate: 7, Period: time.Second, Burst: 9}, 0, Limit{Rate: 7, Period: time.Second, Burst: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fallbackLimit(Check{Rule: &Rule{Name: "p", Algorithm: tt.alg, LocalShare: tt.share}, Limit: tt.lim})
			if got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}
