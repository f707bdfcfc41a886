// Package stat holds the order statistics that the benchmarks and the
// tests that time things share, written once.
package stat

import (
	"math"
	"slices"
)

// Number is what Median and Quantile take.
type Number interface {
	~int | ~int64 | ~float64
}

// Median is the median of xs (the mean of the middle two for an even
// count); zero for none. xs is not changed.
func Median[T Number](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Quantile is the nearest-rank q-quantile of sorted, which must be sorted
// (exact, no interpolation); zero for none.
func Quantile[T Number](sorted []T, q float64) T {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
