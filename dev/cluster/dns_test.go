package cluster_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kube-cosi/cosi/dev/cluster"
	"github.com/kube-cosi/cosi/dev/testenv"
)

// The node's Pods find Services by name as on a cluster with CoreDNS: the cluster DNS answers
// from a real API server's Services and EndpointSlices, through Go's resolver (what the COSI
// images use) with the search path and ndots the kubelet writes into a Pod's resolv.conf, and
// refuses every name outside the cluster's zone.
func TestClusterDNS(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "store"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := []corev1.ServicePort{{Name: "s3", Port: 7070}}
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "versitygw"}, Spec: corev1.ServiceSpec{Ports: port}},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "headless"},
			Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: port},
		},
		{ObjectMeta: metav1.ObjectMeta{Name: "outside"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName, ExternalName: "s3.example.com",
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "alias"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName, ExternalName: "versitygw.store.svc.cluster.local",
		}},
	} {
		if _, err := cs.CoreV1().Services("store").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := cs.CoreV1().Services("store").Get(ctx, "versitygw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := func(ip, host string, ready bool) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
		if host != "" {
			e.Hostname = &host
		}
		return e
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("store").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "headless-1", Labels: map[string]string{discoveryv1.LabelServiceName: "headless"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			endpoint("10.217.0.7", "store-0", true), endpoint("10.217.0.8", "store-1", true),
			endpoint("10.217.0.9", "store-2", false),
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("s3"), Port: ptr.To[int32](7070)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dns, err := cluster.StartDNS(ctx, cs, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dns.Stop)
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, dns.Addr())
			}}
			lookup := func(name string) ([]string, error) {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				addrs, err := r.LookupHost(ctx, name)
				slices.Sort(addrs)
				return addrs, err
			}
			for _, tc := range []struct {
				name string
				want []string
			}{
				{"versitygw.store.svc.cluster.local", []string{svc.Spec.ClusterIP}},
				{"VersityGW.Store.SVC.Cluster.Local.", []string{svc.Spec.ClusterIP}},
				{"headless.store.svc.cluster.local", []string{"10.217.0.7", "10.217.0.8"}},
				{"store-1.headless.store.svc.cluster.local", []string{"10.217.0.8"}},
				// An ExternalName to another Service: the CNAME is followed, as CoreDNS does.
				{"alias.store.svc.cluster.local", []string{svc.Spec.ClusterIP}},
			} {
				got, err := lookup(tc.name)
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
				}
			}
			for _, name := range []string{
				"nothing.store.svc.cluster.local", "versitygw.other.svc.cluster.local",
				"store-2.headless.store.svc.cluster.local", // not ready
				"versitygw.store.pod.cluster.local", "a.b.c.store.svc.cluster.local",
				"s3.versitygw.store.svc.cluster.local", // a hostname of a Service that is not headless
				// Outside the zone: no such host (nothing is forwarded), so a search path ends so.
				"example.com", "versitygw",
			} {
				if got, err := lookup(name); !isNotFound(err) {
					t.Errorf("%s: %v, %v; want not found", name, got, err)
				}
			}
			cname, err := r.LookupCNAME(t.Context(), "outside.store.svc.cluster.local")
			if err != nil || cname != "s3.example.com." {
				t.Errorf("the ExternalName Service: CNAME %q, %v", cname, err)
			}
		})
	}

	t.Run("nothing outside the zone", func(t *testing.T) {
		for _, name := range []string{"example.com.", "kubernetes.io.", "local.", "7.0.217.10.in-addr.arpa."} {
			h, msg := query(t, dns.Addr(), name, dnsmessage.TypeA)
			if h.RCode != dnsmessage.RCodeNameError || h.Authoritative || len(msg.Answers) > 0 {
				t.Errorf("%s: %v, authoritative %t, %d answers; want a non-authoritative NXDOMAIN (nothing is "+
					"forwarded)", name, h.RCode, h.Authoritative, len(msg.Answers))
			}
		}
	})
	t.Run("TCP connections are bounded", func(t *testing.T) {
		var idle []net.Conn
		defer func() {
			for _, c := range idle {
				c.Close()
			}
		}()
		for range 64 { // maxTCPConns idle connections: each holds its place until it closes or idles out
			c, err := net.Dial("tcp", dns.Addr())
			if err != nil {
				t.Fatal(err)
			}
			idle = append(idle, c)
		}
		c, err := net.Dial("tcp", dns.Addr()) // accepted by the kernel, not served yet
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		q, err := (&dnsmessage.Message{Header: dnsmessage.Header{ID: 9}, Questions: []dnsmessage.Question{{
			Name: dnsmessage.MustNewName("versitygw.store.svc.cluster.local."), Type: dnsmessage.TypeA,
			Class: dnsmessage.ClassINET,
		}}}).Pack()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(append([]byte{byte(len(q) >> 8), byte(len(q))}, q...)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, 512)
		if n, err := c.Read(buf); err == nil {
			t.Fatalf("a connection past the bound was served (%d bytes)", n)
		}
		// UDP is served meanwhile, and the waiting connection once one closes.
		if h, _ := query(t, dns.Addr(), "versitygw.store.svc.cluster.local.", dnsmessage.TypeA); h.RCode != 0 {
			t.Errorf("UDP with the TCP connections taken: %v", h.RCode)
		}
		idle[0].Close()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(c, buf[:2]); err != nil {
			t.Fatalf("the waiting connection was not served once one closed: %v", err)
		}
	})
	t.Run("no AAAA, and the SOA for caching", func(t *testing.T) {
		h, msg := query(t, dns.Addr(), "versitygw.store.svc.cluster.local.", dnsmessage.TypeAAAA)
		if h.RCode != dnsmessage.RCodeSuccess || len(msg.Answers) != 0 || len(msg.Authorities) != 1 {
			t.Errorf("AAAA: %v, %d answers, %d authorities", h.RCode, len(msg.Answers), len(msg.Authorities))
		}
	})
	t.Run("the Pod's search path", func(t *testing.T) {
		// A Pod in namespace app asks for versitygw.store.svc with ndots:5: the resolver tries
		// the search domains first; the first that exists answers.
		var got []string
		for _, suffix := range []string{"app.svc.cluster.local.", "svc.cluster.local.", "cluster.local."} {
			h, msg := query(t, dns.Addr(), "versitygw.store.svc."+suffix, dnsmessage.TypeA)
			got = append(got, h.RCode.String())
			if h.RCode == dnsmessage.RCodeSuccess && len(msg.Answers) == 1 {
				return
			}
		}
		t.Errorf("no search domain found the Service: %v", got)
	})
	t.Run("a new Service is answered", func(t *testing.T) {
		s, err := cs.CoreV1().Services("store").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "later"}, Spec: corev1.ServiceSpec{Ports: port},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, msg := query(t, dns.Addr(), "later.store.svc.cluster.local.", dnsmessage.TypeA)
			if len(msg.Answers) == 1 {
				if a := msg.Answers[0].Body.(*dnsmessage.AResource).A; net.IP(a[:]).String() != s.Spec.ClusterIP {
					t.Errorf("got %v, want %s", net.IP(a[:]), s.Spec.ClusterIP)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the new Service was never answered")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func isNotFound(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && dnsErr.IsNotFound
}

// query asks addr over UDP for name's records of type typ.
func query(t *testing.T, addr, name string, typ dnsmessage.Type) (dnsmessage.Header, dnsmessage.Message) {
	t.Helper()
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 7, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var msg dnsmessage.Message
	if err := msg.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	if msg.ID != 7 || !msg.Response || !strings.EqualFold(msg.Questions[0].Name.String(), name) {
		t.Fatalf("not the answer to the query: %+v", msg.Header)
	}
	return msg.Header, msg
}
