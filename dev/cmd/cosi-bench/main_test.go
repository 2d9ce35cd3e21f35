package main

import (
	"slices"
	"testing"
)

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("-scale", " 3000, 10000 ,20000")
	if err != nil || !slices.Equal(got, []int{3000, 10000, 20000}) {
		t.Errorf("parseSizes = %v, %v", got, err)
	}
	if got, err := parseSizes("-n", ""); err != nil || got != nil {
		t.Errorf("empty list: %v, %v; want none", got, err)
	}
	for _, bad := range []string{"0", "-5", "10,x", "10,,20"} {
		if _, err := parseSizes("-scale", bad); err == nil || err.Error()[:6] != "-scale" {
			t.Errorf("parseSizes(%q): %v, want an error naming -scale", bad, err)
		}
	}
}
