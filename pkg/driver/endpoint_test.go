package driver

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		endpoint, wantPath, wantErr string
	}{
		{endpoint: "unix:///var/lib/cosi/driver.sock", wantPath: "/var/lib/cosi/driver.sock"},
		{endpoint: "tcp://127.0.0.1:9000", wantErr: "only unix://"},
		{endpoint: "/var/lib/cosi/driver.sock", wantErr: "only unix://"},
		{endpoint: "unix://relative/driver.sock", wantErr: "must be absolute"},
		{endpoint: "unix:///var/lib/cosi/driver", wantErr: "must end in .sock"},
		{endpoint: "unix:///.sock", wantErr: "must end in .sock"},
		{endpoint: "", wantErr: "only unix://"},
	} {
		path, err := ParseEndpoint(tc.endpoint)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParseEndpoint(%q): %v", tc.endpoint, err)
		case tc.wantErr == "" && path != tc.wantPath:
			t.Errorf("ParseEndpoint(%q) = %q, want %q", tc.endpoint, path, tc.wantPath)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseEndpoint(%q) error = %v, want one containing %q", tc.endpoint, err, tc.wantErr)
		}
	}
}

func TestListen(t *testing.T) {
	t.Run("new socket gets the restricted mode", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "driver.sock")
		lis, err := listen(path, DefaultSocketMode)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != DefaultSocketMode {
			t.Errorf("socket mode %v, want %v", info.Mode().Perm(), DefaultSocketMode)
		}
	})
	t.Run("stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "driver.sock")
		stale, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		stale.(*net.UnixListener).SetUnlinkOnClose(false) // a crashed driver leaves its socket
		stale.Close()
		lis, err := listen(path, DefaultSocketMode)
		if err != nil {
			t.Fatalf("listening over a stale socket: %v", err)
		}
		lis.Close()
	})
	t.Run("live socket is left alone", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "driver.sock")
		live, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()
		if _, err := listen(path, DefaultSocketMode); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("listening over a live socket: %v, want an in-use error", err)
		}
		if conn, err := net.Dial("unix", path); err != nil {
			t.Errorf("the live socket no longer accepts connections: %v", err)
		} else {
			conn.Close()
		}
	})
	t.Run("regular file is not removed", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "driver.sock")
		if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := listen(path, DefaultSocketMode); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("listening over a file: %v, want a not-a-socket error", err)
		}
		if data, err := os.ReadFile(path); err != nil || string(data) != "data" {
			t.Errorf("the file was changed: %q, %v", data, err)
		}
	})
	t.Run("missing directory is not created", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "missing", "driver.sock")
		if _, err := listen(path, DefaultSocketMode); err == nil {
			t.Fatal("listening in a missing directory succeeded")
		}
		if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
			t.Errorf("the directory was created: %v", err)
		}
	})
}
