package requeue

import (
	"testing"
	"time"
)

// The conflicts of an object are reported at once, then at most once per conflictInterval, each
// report with the conflicts since the previous one.
func TestConflictLogFoldsConflictsIntoReports(t *testing.T) {
	l := &conflictLog{objects: map[string]*conflictCount{}}
	t0 := time.Now()
	for i, tc := range []struct {
		at   time.Duration
		want int
	}{
		{0, 1}, {time.Second, 0}, {2 * time.Second, 0}, {conflictInterval, 3}, {conflictInterval + time.Second, 0},
		{3 * conflictInterval, 2},
	} {
		if got := l.record("a", t0.Add(tc.at)); got != tc.want {
			t.Errorf("conflict %d at +%v: report %d, want %d", i, tc.at, got, tc.want)
		}
	}
	if got := l.record("b", t0.Add(time.Second)); got != 1 {
		t.Errorf("another object's first conflict: report %d, want 1", got)
	}
}
