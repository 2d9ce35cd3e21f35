package driver

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// ReadEnvFile reads a credentials file of KEY=VALUE lines, as a driver's admin credentials are
// mounted from a Kubernetes Secret: blank lines and lines starting with # are skipped, an
// "export " prefix and quotes around the value are dropped. An error names the file and the
// line, never a value.
func ReadEnvFile(file string) (map[string]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	values := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			return nil, fmt.Errorf("%s line %d: want KEY=VALUE", file, n)
		}
		values[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	return values, nil
}

// FileChanged reports whether the file now is another than the one read: another file (a
// Kubernetes Secret volume swaps in a new one through a symlink), another modification time or
// size. A nil read has always changed.
func FileChanged(read, now os.FileInfo) bool {
	return read == nil || !os.SameFile(read, now) || !read.ModTime().Equal(now.ModTime()) || read.Size() != now.Size()
}
