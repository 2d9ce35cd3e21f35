package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// clusterDomain is the kubelet's clusterDomain (kubeletConfig) and the zone DNS serves.
const clusterDomain = "cluster.local"

// dnsTTL is the TTL of every answer: short, as CoreDNS's kubernetes plugin's (5 s), so that a
// replaced Service is seen at once.
const dnsTTL = 5

// DNS answers the node's Pods for the cluster's names from the Services and
// EndpointSlices the API server holds, as CoreDNS's kubernetes plugin does on a real cluster (see
// the Kubernetes DNS specification, "DNS for Services and Pods"):
//
//   - <service>.<namespace>.svc.cluster.local: A, the Service's ClusterIP; for a headless Service,
//     the IPv4 addresses of its ready endpoints; for an ExternalName Service, a CNAME to that name,
//     followed when the name is in cluster.local (another Service), as CoreDNS does.
//   - <hostname>.<service>.<namespace>.svc.cluster.local: A, the endpoint of a headless Service
//     with that hostname (a StatefulSet's Pods).
//   - Other types on those names, and the names between (svc.cluster.local, <namespace>.svc...),
//     answer no records; other names under cluster.local, NXDOMAIN.
//
// Every name outside cluster.local is NXDOMAIN, not authoritative: it forwards nothing, so the
// node's Pods contact no resolver, and no address, the user did not give them; nothing outside is
// reachable from the node anyway, and a client's search path then ends in "no such host" rather
// than a resolver error. It listens on the node's own address (Start), which nothing outside this
// machine reaches (guardAddress), and serves at most maxTCPConns TCP connections at once.
type DNS struct {
	services  corelisters.ServiceLister
	endpoints discoverylisters.EndpointSliceLister

	udp   net.PacketConn
	tcp   net.Listener
	conns chan struct{} // a token per TCP connection served
	wg    sync.WaitGroup
	stop  context.CancelFunc
}

// StartDNS serves the cluster's names on addr (UDP and TCP, host:port) from cs's Services
// and EndpointSlices, once their caches are filled. Stop ends it.
func StartDNS(ctx context.Context, cs kubernetes.Interface, addr string) (*DNS, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactory(cs, 0)
	d := &DNS{
		services:  f.Core().V1().Services().Lister(),
		endpoints: f.Discovery().V1().EndpointSlices().Lister(),
		stop:      cancel,
		conns:     make(chan struct{}, maxTCPConns),
	}
	f.Start(ctx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	for typ, ok := range f.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			cancel()
			f.Shutdown()
			return nil, fmt.Errorf("the cluster DNS's cache of %v did not fill", typ)
		}
	}
	if err := d.listen(addr); err != nil {
		cancel()
		f.Shutdown()
		return nil, err
	}
	d.wg.Add(3)
	go func() {
		defer d.wg.Done()
		<-ctx.Done()
		d.udp.Close()
		d.tcp.Close()
		f.Shutdown()
	}()
	go func() { defer d.wg.Done(); d.serveUDP() }()
	go func() { defer d.wg.Done(); d.serveTCP() }()
	return d, nil
}

// listen listens on addr with UDP and TCP, on one port: a free one for port 0 (tests), tried
// again when TCP's is taken.
func (d *DNS) listen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if d.udp, err = net.ListenPacket("udp4", addr); err != nil {
			return err
		}
		if d.tcp, err = net.Listen("tcp4", d.udp.LocalAddr().String()); err == nil {
			return nil
		}
		d.udp.Close()
		if port != "0" || attempt == 10 {
			return err
		}
	}
}

// Addr is the address the cluster DNS serves on.
func (d *DNS) Addr() string { return d.udp.LocalAddr().String() }

// Stop stops serving and waits until the server's goroutines are done.
func (d *DNS) Stop() {
	if d == nil {
		return
	}
	d.stop()
	d.wg.Wait()
}

func (d *DNS) serveUDP() {
	buf := make([]byte, 512)
	for {
		n, from, err := d.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp := d.answer(buf[:n], 512); resp != nil {
			_, _ = d.udp.WriteTo(resp, from)
		}
	}
}

// maxTCPConns bounds the TCP connections served at once: more wait in the listener's backlog.
const maxTCPConns = 64

func (d *DNS) serveTCP() {
	for {
		d.conns <- struct{}{}
		conn, err := d.tcp.Accept()
		if err != nil {
			<-d.conns
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer func() { <-d.conns }()
			defer conn.Close()
			d.serveConn(conn)
		}()
	}
}

// serveConn answers the length-prefixed queries of one TCP connection (RFC 1035 4.2.2) until the
// client closes it or is idle for 10 s.
func (d *DNS) serveConn(conn net.Conn) {
	var lenBuf [2]byte
	for {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(conn, lenBuf[:]); err != nil {
			return
		}
		msg := make([]byte, int(lenBuf[0])<<8|int(lenBuf[1]))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		resp := d.answer(msg, 65535)
		if resp == nil {
			return
		}
		out := append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...)
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

// answer returns the response to query in at most limit bytes (truncated, TC set, when the
// answers do not fit), or nil when query is not one to answer (not a query, unreadable).
func (d *DNS) answer(query []byte, limit int) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired}
	q, err := p.Question()
	if err != nil || h.OpCode != 0 {
		resp.RCode = dnsmessage.RCodeNotImplemented
		if err != nil {
			resp.RCode = dnsmessage.RCodeFormatError
		}
		return build(resp, nil, nil)
	}
	name := strings.ToLower(q.Name.String())
	if q.Class != dnsmessage.ClassINET || !inZone(name) {
		resp.RCode = dnsmessage.RCodeNameError
		return build(resp, &q, nil)
	}
	resp.Authoritative = true
	records, exists := d.lookup(name)
	if !exists {
		resp.RCode = dnsmessage.RCodeNameError
	}
	var answers []record
	for _, r := range records {
		if r.cname != "" || q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL {
			answers = append(answers, r)
		}
	}
	out := build(resp, &q, answers)
	if len(out) > limit {
		resp.Truncated = true
		out = build(resp, &q, nil)
	}
	return out
}

// record is one answer: an A record, or a CNAME when cname is set; owner is its name when it is
// not the question's (a record that follows a CNAME).
type record struct {
	a     [4]byte
	cname string
	owner string
}

func inZone(name string) bool {
	return name == clusterDomain+"." || strings.HasSuffix(name, "."+clusterDomain+".")
}

// lookup returns the records of name (lower case, fully qualified, in the zone), and whether the
// name exists (false: NXDOMAIN).
func (d *DNS) lookup(name string) ([]record, bool) {
	rest := strings.TrimSuffix(strings.TrimSuffix(name, clusterDomain+"."), ".")
	if rest == "" || rest == "svc" {
		return nil, true
	}
	labels := strings.Split(rest, ".")
	if labels[len(labels)-1] != "svc" {
		return nil, false
	}
	labels = labels[:len(labels)-1]
	switch len(labels) {
	case 1: // <namespace>.svc: a name between, there when any Service is in the namespace
		svcs, err := d.services.Services(labels[0]).List(everything)
		return nil, err == nil && len(svcs) > 0
	case 2: // <service>.<namespace>.svc
		return d.serviceRecords(labels[1], labels[0])
	case 3: // <hostname>.<service>.<namespace>.svc
		return d.hostRecords(labels[2], labels[1], labels[0])
	}
	return nil, false
}

var everything = labels.Everything()

// lookupDirect is lookup for the target of an ExternalName: its A records, not another CNAME's.
func (d *DNS) lookupDirect(name string) ([]record, bool) {
	records, ok := d.lookup(name)
	var direct []record
	for _, r := range records {
		if r.cname == "" {
			direct = append(direct, r)
		}
	}
	return direct, ok
}

func (d *DNS) serviceRecords(namespace, name string) ([]record, bool) {
	svc, err := d.services.Services(namespace).Get(name)
	if err != nil {
		return nil, false
	}
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		target := strings.ToLower(strings.TrimSuffix(svc.Spec.ExternalName, ".") + ".")
		records := []record{{cname: target}}
		if inZone(target) && target != namespace+"."+name+".svc."+clusterDomain+"." {
			// Another Service: its records follow the CNAME (one level: an ExternalName to an
			// ExternalName is answered with its CNAME alone).
			if t, ok := d.lookupDirect(target); ok {
				for _, r := range t {
					r.owner = target
					records = append(records, r)
				}
			}
		}
		return records, true
	case svc.Spec.ClusterIP != corev1.ClusterIPNone:
		if a, ok := ipv4(svc.Spec.ClusterIP); ok {
			return []record{{a: a}}, true
		}
		return nil, true
	}
	var records []record
	seen := map[[4]byte]bool{}
	d.readyEndpoints(namespace, name, func(_ discoveryv1.Endpoint, a [4]byte) {
		if !seen[a] {
			seen[a] = true
			records = append(records, record{a: a})
		}
	})
	return records, true
}

func (d *DNS) hostRecords(namespace, service, host string) ([]record, bool) {
	svc, err := d.services.Services(namespace).Get(service)
	if err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return nil, false // hostnames are a headless Service's
	}
	var records []record
	d.readyEndpoints(namespace, service, func(e discoveryv1.Endpoint, a [4]byte) {
		if e.Hostname != nil && strings.EqualFold(*e.Hostname, host) {
			records = append(records, record{a: a})
		}
	})
	return records, len(records) > 0
}

// readyEndpoints calls f with each ready IPv4 endpoint address of the Service namespace/name.
func (d *DNS) readyEndpoints(namespace, name string, f func(discoveryv1.Endpoint, [4]byte)) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
	slices, err := d.endpoints.EndpointSlices(namespace).List(sel)
	if err != nil {
		return
	}
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, addr := range e.Addresses {
				if a, ok := ipv4(addr); ok {
					f(e, a)
				}
			}
		}
	}
}

func ipv4(s string) ([4]byte, bool) {
	ip, err := netip.ParseAddr(s)
	if err != nil || !ip.Is4() {
		return [4]byte{}, false
	}
	return ip.As4(), true
}

// build writes a response with the question q (when not nil) and answers, and for an
// authoritative answer without records the zone's SOA, which resolvers cache the negative answer
// by (RFC 2308).
func build(h dnsmessage.Header, q *dnsmessage.Question, answers []record) []byte {
	b := dnsmessage.NewBuilder(nil, h)
	b.EnableCompression()
	_ = b.StartQuestions()
	if q != nil {
		_ = b.Question(*q)
	}
	_ = b.StartAnswers()
	for _, r := range answers {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		if r.owner != "" {
			owner, err := dnsmessage.NewName(r.owner)
			if err != nil {
				continue
			}
			rh.Name = owner
		}
		if r.cname != "" {
			target, err := dnsmessage.NewName(r.cname)
			if err != nil {
				continue
			}
			_ = b.CNAMEResource(rh, dnsmessage.CNAMEResource{CNAME: target})
			continue
		}
		_ = b.AResource(rh, dnsmessage.AResource{A: r.a})
	}
	if h.Authoritative && len(answers) == 0 {
		_ = b.StartAuthorities()
		zone := dnsmessage.MustNewName(clusterDomain + ".")
		_ = b.SOAResource(
			dnsmessage.ResourceHeader{Name: zone, Class: dnsmessage.ClassINET, TTL: dnsTTL},
			dnsmessage.SOAResource{
				NS:     dnsmessage.MustNewName("ns.dns." + clusterDomain + "."),
				MBox:   dnsmessage.MustNewName("hostmaster." + clusterDomain + "."),
				Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, MinTTL: dnsTTL,
			},
		)
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
