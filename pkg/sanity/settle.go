package sanity

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// settled asks check until its answer is done or the settle window (Config.Settle) has passed,
// and notes how long the effect took to show. It returns the last answer: a done one, or what
// the backend still said when the window closed. Without a window it asks once.
func settled[V any](
	ctx context.Context, s *suite, check func(context.Context) (V, error), done func(V) bool,
) (V, error) {
	start := time.Now()
	deadline := start.Add(s.cfg.Settle)
	wait := 10 * time.Millisecond
	for {
		got, err := check(ctx)
		if err != nil || done(got) {
			if err == nil && s.cfg.Settle > 0 {
				s.mu.Lock()
				s.effects = append(s.effects, time.Since(start))
				s.mu.Unlock()
			}
			return got, err
		}
		if !time.Now().Add(wait).Before(deadline) {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

func (s *suite) settleBool(ctx context.Context, check func(context.Context) (bool, error), want bool) (bool, error) {
	return settled(ctx, s, check, func(got bool) bool { return got == want })
}

func (s *suite) settleString(
	ctx context.Context, check func(context.Context) (string, error), want string,
) (string, error) {
	if want == anyAccount {
		return settled(ctx, s, check, func(got string) bool { return got != "" })
	}
	return settled(ctx, s, check, func(got string) bool { return got == want })
}

// settleReportLocked says how long the effects the suite checked took to show in the backend, with
// Config.Settle set: how many, the median, the 99th percentile and the longest.
// The caller holds s.mu.
func (s *suite) settleReportLocked() string {
	if len(s.effects) == 0 {
		return fmt.Sprintf("no effect checked (settle window %v)", s.cfg.Settle)
	}
	d := slices.Clone(s.effects)
	slices.Sort(d)
	q := func(f float64) time.Duration { return d[min(len(d)-1, int(f*float64(len(d))))].Round(time.Millisecond) }
	return fmt.Sprintf("%d effects checked within the settle window of %v: median %v, 99th percentile %v, longest %v",
		len(d), s.cfg.Settle, q(0.5), q(0.99), d[len(d)-1].Round(time.Millisecond))
}
