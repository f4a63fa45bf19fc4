package brokertest

import (
	"context"
	"testing"
	"time"
)

// Must runs f with a context that ends after d and fails tb with f's
// error (tb.Fatal, so call it from the test's goroutine). It adapts the
// package's waits to tests that stop at the first failure.
func Must(tb testing.TB, d time.Duration, f func(context.Context) error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := f(ctx); err != nil {
		tb.Fatal(err)
	}
}

// MustGet is Must for a wait that returns what it waited for.
func MustGet[T any](tb testing.TB, d time.Duration, f func(context.Context) (T, error)) T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	v, err := f(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}
