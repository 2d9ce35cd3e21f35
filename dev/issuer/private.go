package issuer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A private front listens in a network namespace of its own, made by the process that needs it,
// on an address of a documentation range (RFC 5737: 198.51.100.0/24, 203.0.113.0/24), which the
// IAM service's guard accepts and no network routes. A veth pair links the namespace to the
// host's: the namespace's end has the front's address X and a /32 route to the host's end, which
// has the address Y and a /32 route to X. Nothing in the host's namespace listens on X, so:
//   - another host cannot reach the front: even if it sends packets for X to this machine and
//     this machine forwards them (ip_forward), the namespace has no route but the one to Y
//     (and the networks AllowFrom adds), so it answers nothing else; and no ARP for X is answered
//     on the machine's real interfaces, as it would be for an address of a dummy interface in the
//     host's namespace (arp_ignore 0, the weak host model);
//   - the Versity gateway, in the host's namespace, reaches it: X is routed to the veth, the
//     connection comes from Y, and the front's answers go back by the namespace's route to Y.
//
// The namespace lives as long as the front's descriptor of it (Close, or the process's end, even
// by kill -9): the kernel then removes it and both ends of the veth with it, so nothing is left
// to clean up. The address pair is reserved by an abstract unix socket (lock), which dies with
// its process too.

// privateNets are the documentation ranges a private front takes its address pairs from.
var privateNets = []string{"198.51.100.0/24", "203.0.113.0/24"}

// privateNS is a private front's namespace and its link to the host.
type privateNS struct {
	ns       *os.File  // the namespace: kept open, it keeps the namespace
	ip, peer net.IP    // X (the front's) in ns, Y (the host's end)
	hostLink string    // the host's end of the veth
	reserved io.Closer // the pair's lock

	closeOnce sync.Once
	closeErr  error
}

// innerLink is the name of the veth's end inside the namespace (alone there, so fixed).
const innerLink = "issuer0"

// newPrivate makes a private namespace for a front, on preferred if that pair is free (Load's
// address from a previous run), else on the first free pair from a random one.
func newPrivate(preferred net.IP) (*privateNS, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: no ip command (iproute2) to link a network namespace for the issuer: %w",
			ErrUnavailable, err)
	}
	ns, err := newNetns()
	if err != nil {
		return nil, err
	}
	pairs := candidatePairs()
	if preferred != nil {
		pairs = append([][2]net.IP{{preferred, peerOf(preferred)}}, pairs...)
	}
	for i, pair := range pairs {
		lock, err := tryLock(lockName(pair[0].String()))
		if err != nil {
			continue
		}
		// The pair's lock is free, so no front has it; but the kernel removes the link of a
		// namespace whose process ended a moment later: the preferred pair (the previous run's)
		// is worth that moment.
		wait := time.Duration(0)
		if i == 0 && preferred != nil {
			wait = 3 * time.Second
		}
		if !free(pair, wait) {
			_ = lock.Close()
			continue
		}
		p := &privateNS{ns: ns, ip: pair[0], peer: pair[1], reserved: lock}
		if err := p.link(); err != nil {
			_ = p.Close()
			return nil, err
		}
		return p, nil
	}
	_ = ns.Close()
	return nil, fmt.Errorf("%w: every address pair of %s is in use on this machine", ErrUnavailable,
		strings.Join(privateNets, " and "))
}

// newNetns makes a network namespace and returns it open, without entering it (onThread).
func newNetns() (*os.File, error) {
	var ns *os.File
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("%w: making a network namespace for the issuer needs root (CAP_SYS_ADMIN and "+
				"CAP_NET_ADMIN): %w; set %s to an address of this machine to publish there instead",
				ErrUnavailable, err, AddressEnv)
		}
		return nil
	}, func() error {
		var err error
		ns, err = os.Open("/proc/thread-self/ns/net")
		return err
	})
	return ns, err
}

// in runs fn on a thread in the namespace: a socket fn opens is the namespace's, and a command
// it starts runs there.
func (p *privateNS) in(fn func() error) error {
	return onThread(func() error {
		if err := unix.Setns(int(p.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("issuer: entering the front's network namespace: %w", err)
		}
		return nil
	}, fn)
}

// onThread runs enter, then fn, on a goroutine locked to its thread, and puts the thread back in
// the host's network namespace. The thread is unlocked only once it is back: on any failure the
// goroutine ends locked, and Go ends its thread with it, so that no other goroutine ever runs in
// the namespace.
func onThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("%w: %w", ErrUnavailable, err)
			return
		}
		defer host.Close()
		if err := enter(); err != nil {
			errc <- err
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(fnErr, fmt.Errorf("issuer: back to the host's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// ipCmd runs the ip command with the namespace as /proc/self/fd/3.
func (p *privateNS) ipCmd(args ...string) error {
	cmd := exec.Command("ip", args...)
	cmd.ExtraFiles = []*os.File{p.ns}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("issuer: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// link makes the veth pair, its inner end made in the namespace (no moment where both are the
// host's), and gives both ends their address and /32 route.
func (p *privateNS) link() error {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	p.hostLink = "cosi-iss-" + hex.EncodeToString(b)
	if err := p.ipCmd("link", "add", p.hostLink, "type", "veth", "peer", "name", innerLink,
		"netns", "/proc/self/fd/3"); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// No IPv6 on the host's end: its link-local address would be one more of the host's.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+p.hostLink+"/disable_ipv6", []byte("1"), 0o644); err != nil &&
		!errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("issuer: %w", err)
	}
	if err := p.ipCmd("addr", "add", p.peer.String(), "peer", p.ip.String(), "dev", p.hostLink); err != nil {
		return err
	}
	if err := p.ipCmd("link", "set", p.hostLink, "up"); err != nil {
		return err
	}
	return p.in(func() error {
		if err := p.ipCmd("addr", "add", p.ip.String(), "peer", p.peer.String(), "dev", innerLink); err != nil {
			return err
		}
		return p.ipCmd("link", "set", innerLink, "up")
	})
}

// allowFrom routes network's answers back through the host's end.
func (p *privateNS) allowFrom(network string) error {
	if _, _, err := net.ParseCIDR(network); err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	return p.in(func() error { return p.ipCmd("route", "add", network, "via", p.peer.String(), "dev", innerLink) })
}

// listen listens on address in the namespace.
func (p *privateNS) listen(address string) (net.Listener, error) {
	var l net.Listener
	err := p.in(func() error {
		var err error
		l, err = net.Listen("tcp", address)
		return err
	})
	return l, err
}

// Close removes the veth (both ends: its addresses are gone when Close returns, for the next
// front on the pair) and lets the kernel remove the namespace, and frees the address pair. It
// may be called again.
func (p *privateNS) Close() error {
	p.closeOnce.Do(func() {
		var errs []error
		if p.hostLink != "" {
			if err := p.ipCmd("link", "delete", p.hostLink); err != nil && !strings.Contains(err.Error(), "Cannot find") {
				errs = append(errs, err)
			}
		}
		p.closeErr = errors.Join(append(errs, p.ns.Close(), p.reserved.Close())...)
	})
	return p.closeErr
}

// candidatePairs lists the address pairs (X even, Y = X+1) of privateNets, from a random one on,
// so that processes starting together seldom try the same one.
func candidatePairs() [][2]net.IP {
	var pairs [][2]net.IP
	for _, n := range privateNets {
		_, ipnet, _ := net.ParseCIDR(n)
		base := ipnet.IP.To4()
		for last := 2; last < 254; last += 2 {
			ip := net.IPv4(base[0], base[1], base[2], byte(last)).To4()
			pairs = append(pairs, [2]net.IP{ip, peerOf(ip)})
		}
	}
	start, err := rand.Int(rand.Reader, big.NewInt(int64(len(pairs))))
	if err != nil {
		return pairs
	}
	i := int(start.Int64())
	return append(pairs[i:], pairs[:i]...)
}

// peerOf is the host's end of the pair whose front is ip.
func peerOf(ip net.IP) net.IP {
	v4 := ip.To4()
	return net.IPv4(v4[0], v4[1], v4[2], v4[3]|1).To4()
}

// free tells whether neither address of pair is this machine's or on one of its networks,
// waiting up to wait for them to go.
func free(pair [2]net.IP, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		taken := localNets()
		if !taken(pair[0]) && !taken(pair[1]) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// localNets tells whether an address is one of this machine's or on the network of one of its
// interfaces: a /32 route to it would hide a real neighbour (this machine may use a documentation
// range as its network), or it is another front's.
func localNets() func(net.IP) bool {
	addrs, _ := net.InterfaceAddrs()
	return func(ip net.IP) bool {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && (n.Contains(ip) || n.IP.Equal(ip)) {
				return true
			}
		}
		return false
	}
}

// privateAddress tells whether ip is one a private front may have.
func privateAddress(ip net.IP) bool {
	for _, n := range privateNets {
		_, ipnet, _ := net.ParseCIDR(n)
		if ipnet.Contains(ip) && ip.To4() != nil && ip.To4()[3]%2 == 0 && ip.To4()[3] != 0 && ip.To4()[3] < 254 {
			return true
		}
	}
	return false
}
