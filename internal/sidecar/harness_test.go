package sidecar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

const (
	testNamespace    = "apps"
	sidecarNamespace = "cosi-system"
	sidecarSA        = "cosi-sidecar"
)

var (
	env *testenv.Env
	// sidecarConfig connects as the sidecar's ServiceAccount, bound to the generated ClusterRole
	// and nothing else, so that a missing or excessive permission shows in the tests.
	sidecarConfig *rest.Config
)

// TestMain runs the sidecar as its ServiceAccount, bound to the generated ClusterRole only.
func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		var err error
		if sidecarConfig, err = env.ServiceAccountConfig(
			ctx,
			"config/rbac/sidecar/role.yaml",
			sidecarNamespace,
			sidecarSA,
		); err != nil {
			return err
		}
		return env.CreateNamespace(ctx, testNamespace)
	})
}

var driverCounter atomic.Int64

// harness is one driver (the memory driver on a real Unix socket) and its sidecar, with a driver
// name of its own so that tests running in parallel do not see each other's objects.
type harness struct {
	t        *testing.T
	name     string
	endpoint string
	driver   *memory.Driver
	faults   *memory.Faults
	calls    *memory.Calls
	stop     func()
	// config is what the sidecar connects with: sidecarConfig unless a test counts requests.
	config *rest.Config
}

func newHarness(t *testing.T, cfg memory.Config) *harness {
	t.Helper()
	return newHarnessWith(t, cfg, sidecarConfig)
}

// newHarnessWith is newHarness with a sidecar that connects with config.
func newHarnessWith(t *testing.T, cfg memory.Config, config *rest.Config) *harness {
	t.Helper()
	h := &harness{t: t, faults: &memory.Faults{}, calls: &memory.Calls{}, config: config}
	h.name = fmt.Sprintf("memory-%d.sidecar-test.cosi.io", driverCounter.Add(1))
	cfg.Name = h.name
	var err error
	h.driver, err = memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.endpoint = "unix://" + filepath.Join(t.TempDir(), "driver.sock")
	h.startDriver()
	h.startSidecar()
	return h
}

func (h *harness) startDriver() {
	testenv.ServeDriver(h.t, h.endpoint, h.driver, h.calls.Interceptor(), h.faults.Interceptor())
}

func sidecarOptions(endpoint string) sidecar.Options { return testenv.SidecarOptions(endpoint) }

// restartSidecar stops the sidecar and runs it again connecting with config, its options changed
// by set.
func (h *harness) restartSidecar(config *rest.Config, set func(*sidecar.Options)) {
	h.stop()
	opts := sidecarOptions(h.endpoint)
	set(&opts)
	h.stop = testenv.StartSidecar(h.t, config, opts)
}

// startSidecar runs the sidecar until stop is called or the test ends.
func (h *harness) startSidecar() {
	h.stop = testenv.StartSidecar(h.t, h.config, sidecarOptions(h.endpoint))
}

var objCounter atomic.Int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, objCounter.Add(1))
}

// bucket returns a dynamically provisioned Bucket for the harness's driver, as the controller
// creates it.
func (h *harness) bucket(policy cosiapi.DeletionPolicy, protocols ...cosiapi.Protocol) *cosiapi.Bucket {
	claim := uniqueName("claim")
	return objects.Bucket("bc-"+claim, h.name, policy, objects.BucketProtocols(protocols...),
		objects.ClaimedBy(testNamespace, claim, types.UID("uid-"+claim)))
}

func (h *harness) create(obj client.Object) {
	h.t.Helper()
	if err := env.Client.Create(h.t.Context(), obj); err != nil {
		h.t.Fatal(err)
	}
}

// provisioned waits until the object's Provisioned condition is True and returns it fresh.
func provisioned[T client.Object](t *testing.T, obj T, conds func(T) []metav1.Condition) T {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(conds(obj), cosiapi.ConditionProvisioned)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("%s not provisioned: %+v", obj.GetName(), conds(obj))
		}
		return nil
	})
	return obj
}

func bucketConditions(b *cosiapi.Bucket) []metav1.Condition       { return b.Status.Conditions }
func accessConditions(a *cosiapi.BucketAccess) []metav1.Condition { return a.Status.Conditions }

// markClaimBeingDeleted sets cosiapi.AnnotationBucketClaimBeingDeleted on obj, as the controller does
// when the BucketClaim of a Bucket is deleted.
func markClaimBeingDeleted(t *testing.T, obj client.Object) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		a := obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[cosiapi.AnnotationBucketClaimBeingDeleted] = "true"
		obj.SetAnnotations(a)
		return env.Client.Update(t.Context(), obj)
	})
}

// events returns the events about an object.
// events returns "Reason: message" of the events about obj.
func events(t *testing.T, obj client.Object) []string { return env.Events(t, obj) }

// waitForEvent waits until an event about obj starts with prefix.
func waitForEvent(t *testing.T, obj client.Object, prefix string) { env.WaitForEvent(t, obj, prefix) }
