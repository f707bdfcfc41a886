package stat

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tt.xs...)
		if got := Median(tt.xs); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.xs[i] {
				t.Fatalf("Median reordered its input: %v, was %v", tt.xs, in)
			}
		}
	}
	if got := Median([]time.Duration{3, 1, 2}); got != 2 {
		t.Errorf("Median of durations = %v, want 2ns", got)
	}
}

func TestQuantile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.5, 5}, {0.9, 9}, {0.99, 10}, {1, 10}} {
		if got := Quantile(s, tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := Quantile([]time.Duration(nil), 0.5); got != 0 {
		t.Errorf("Quantile of none = %v, want 0", got)
	}
}
