package driver_test

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-cosi/cosi/pkg/driver"
)

func TestReadEnvFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "credentials")
	if err := os.WriteFile(file, []byte("# admin\n\nexport A=1\nB = \"two\"\nC='3'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := driver.ReadEnvFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"A": "1", "B": "two", "C": "3"}; !maps.Equal(got, want) {
		t.Errorf("ReadEnvFile = %v, want %v", got, want)
	}
	if err := os.WriteFile(file, []byte("A=1\nsecret-value-without-a-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = driver.ReadEnvFile(file)
	if err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "secret-value") {
		t.Errorf("ReadEnvFile of a bad line: %v, want an error naming line 2 and not its value", err)
	}

	before, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if driver.FileChanged(before, before) || !driver.FileChanged(nil, before) {
		t.Error("FileChanged: the same file changed, or a file never read did not")
	}
	if err := os.WriteFile(file, []byte("A=12345\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if !driver.FileChanged(before, after) {
		t.Error("FileChanged: a rewritten file of another size did not change")
	}
}
