package s3

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCredentialsFileFollowsSecretVolumeUpdates updates a credentials file the way the kubelet
// updates a mounted Secret (the file is a symlink through "..data" to a timestamped directory;
// an update writes a new directory and swaps "..data" with a rename), and the ways it goes wrong
// for a moment (an empty or half-written file): each update is picked up at the next Retrieve,
// and a file that cannot be used fails the call without a key in the error.
func TestCredentialsFileFollowsSecretVolumeUpdates(t *testing.T) {
	dir := t.TempDir()
	version := 0
	publish := func(content string) {
		t.Helper()
		version++
		ts := filepath.Join(dir, "..v"+string(rune('0'+version)))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, "admin.env"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish("AWS_ACCESS_KEY_ID=AKIAFIRST\nAWS_SECRET_ACCESS_KEY=first-secret\n")
	file := filepath.Join(dir, "admin.env")
	if err := os.Symlink(filepath.Join("..data", "admin.env"), file); err != nil {
		t.Fatal(err)
	}
	provider, err := LoadCredentials(file, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	check := func(wantID string) {
		t.Helper()
		c, err := provider.Retrieve(t.Context())
		switch {
		case wantID == "" && err == nil:
			t.Errorf("Retrieve of an unusable file returned key %s", c.AccessKeyID)
		case wantID == "":
			for _, s := range []string{"AKIAFIRST", "first-secret", "AKIASECOND", "second-secret", "AKIAHALF"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error names %s: %v", s, err)
				}
			}
		case err != nil:
			t.Errorf("Retrieve: %v, want key %s", err, wantID)
		case c.AccessKeyID != wantID:
			t.Errorf("Retrieve: key %s, want %s", c.AccessKeyID, wantID)
		}
	}
	check("AKIAFIRST")
	publish("AWS_ACCESS_KEY_ID=AKIASECOND\nAWS_SECRET_ACCESS_KEY=second-secret\n")
	check("AKIASECOND")
	publish("")
	check("")
	publish("AWS_ACCESS_KEY_ID=AKIAHALF\nAWS_SECRET_ACC")
	check("")
	publish("AWS_ACCESS_KEY_ID=AKIASECOND\nAWS_SECRET_ACCESS_KEY=second-secret\n")
	check("AKIASECOND")
}
