package localenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/dev/process"
)

// TestRunListensOnLoopbackOnly runs make run (Run with cosi-local's options and its demo) and,
// once the demo is done and COSI stays up, lists the sockets that this process and every process
// it started listen on in this machine's network namespace (/proc/net/tcp, tcp6, udp, udp6):
// none may be outside 127.0.0.0/8 and ::1. The ServiceAccount issuer listens in a network
// namespace of its own (dev/issuer), so it is not among them; its address must be none of this
// namespace's either.
func TestRunListensOnLoopbackOnly(t *testing.T) {
	repo, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	opts := RunOptions{Options: MakeRunOptions(), Demo: true}
	opts.Dir, opts.RepoRoot, opts.BinDir = t.TempDir(), repo, filepath.Join(repo, "bin")
	if err := process.FreeAddresses(&opts.S3Address, &opts.IAMAddress); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out := &watchedBuffer{want: "Stop with Ctrl-C", seen: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts, out, out) }()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("make run ended before it was up: %v\n%s", err, out.String())
	}
	sockets, err := listeningSockets(os.Getpid())
	cancel()
	if runErr := <-done; runErr != nil {
		t.Errorf("make run: %v", runErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(sockets) == 0 {
		t.Fatalf("no listening socket found for make run's processes: the test cannot see them\n%s", out.String())
	}
	for _, s := range sockets {
		if !s.ip.IsLoopback() {
			t.Errorf("make run's %s (pid %d) listens on %s %s, beyond loopback", s.command, s.pid, s.proto,
				net.JoinHostPort(s.ip.String(), strconv.Itoa(s.port)))
		}
	}
	// The IAM service connects to the issuer: not to an address of this machine's, which other
	// hosts may reach.
	if m := regexp.MustCompile(`issuer https://([^/\s]+)/`).FindStringSubmatch(out.String()); m == nil {
		t.Errorf("make run does not say where the issuer is published")
	} else if local := localAddresses(t); local[strings.Trim(m[1], "[]")] {
		t.Errorf("make run publishes its issuer on %s, an address of this machine's interfaces", m[1])
	}
	if t.Failed() {
		t.Logf("make run's output:\n%s", out.String())
	}
}

// localAddresses are the addresses of the interfaces of this process's network namespace.
func localAddresses(t *testing.T) map[string]bool {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	local := map[string]bool{}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			local[n.IP.String()] = true
		}
	}
	return local
}

// watchedBuffer is make run's output, closing seen when a line starts with want.
type watchedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	for line := range strings.Lines(w.buf.String()) {
		if strings.HasPrefix(line, w.want) {
			w.once.Do(func() { close(w.seen) })
		}
	}
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// socket is a listening socket of a process.
type socket struct {
	pid     int
	command string
	proto   string
	ip      net.IP
	port    int
}

// listeningSockets lists the TCP sockets in LISTEN and the unconnected UDP sockets that root and
// its descendants hold, as the network namespace of root sees them.
func listeningSockets(root int) ([]socket, error) {
	owners := map[string]int{} // socket inode -> pid
	for _, pid := range descendants(root) {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue // ended meanwhile
		}
		for _, fd := range fds {
			target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
				owners[strings.TrimSuffix(inode, "]")] = pid
			}
		}
	}
	var sockets []socket
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", root, proto))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			pid, ours := owners[fields[9]]
			listening := (strings.HasPrefix(proto, "tcp") && fields[3] == "0A") ||
				(strings.HasPrefix(proto, "udp") && fields[3] == "07" && strings.HasSuffix(fields[2], ":0000"))
			if !ours || !listening {
				continue
			}
			ip, port, err := parseProcAddress(fields[1])
			if err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("/proc/net/%s: %w", proto, err)
			}
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			sockets = append(sockets, socket{pid: pid, command: strings.TrimSpace(string(comm)), proto: proto,
				ip: ip, port: port})
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return sockets, nil
}

// parseProcAddress reads /proc/net's ADDR:PORT: the address in hex, 32-bit words in the host's
// byte order (little-endian here), the port in hex.
func parseProcAddress(s string) (net.IP, int, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return nil, 0, fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return nil, 0, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("port %q: %w", s, err)
	}
	return net.IP(raw), int(port), nil
}

// descendants returns root and every process below it.
func descendants(root int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				if ppid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					children[ppid] = append(children[ppid], pid)
				}
			}
		}
	}
	all := []int{root}
	for i := 0; i < len(all); i++ {
		all = append(all, children[all[i]]...)
	}
	return all
}
