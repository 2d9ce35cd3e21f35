package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// provisionPatience is how long a namespace's script waits for its objects to be provisioned
// before it goes on to delete them anyway (deleting what is still being provisioned is part of
// the workload too).
const provisionPatience = 90 * time.Second

// createStatic creates, in the backend, the buckets the static claims import, as an admin would
// before importing them, before any fault.
func (r *run) createStatic(ctx context.Context, p plan) error {
	var ids []string
	for _, ns := range p.namespaces {
		for _, c := range ns.claims {
			if c.static {
				ids = append(ids, c.staticID)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := r.backend.importBuckets(ctx, ids); err != nil {
		return err
	}
	r.ledger.imports(ids...)
	return nil
}

// driverClient connects to the driver where the sidecar does, as an admin with access to it
// would.
func (r *run) driverClient(ctx context.Context) (*driverclient.Client, error) {
	d, err := driverclient.New(r.endpoint,
		driverclient.Options{Logger: logr.Discard()})
	if err != nil {
		return nil, err
	}
	probeCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := d.Probe(probeCtx); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

// work runs the namespaces' scripts, cfg.Writers at once.
func (r *run) work(ctx context.Context, p plan) error {
	var next atomic.Int64
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, r.cfg.Writers)
	for w := range r.cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(p.namespaces); i = int(next.Add(1)) - 1 {
				if err := r.namespace(ctx, p.namespaces[i]); err != nil {
					errs[w] = fmt.Errorf("namespace %s: %w", p.namespaces[i].name, err)
					return
				}
				if n := done.Add(1); n%10 == 0 || int(n) == len(p.namespaces) {
					r.logf("%d of %d namespaces done", n, len(p.namespaces))
				}
			}
		}()
	}
	wg.Wait()
	// The kept accesses' rotations and refreshes still to be asked.
	r.asides.Wait()
	return errors.Join(append(errs, r.asideErrs...)...)
}

// asideErr records the error of a background request.
func (r *run) asideErr(err error) {
	r.ledger.mu.Lock()
	defer r.ledger.mu.Unlock()
	r.asideErrs = append(r.asideErrs, err)
}

// namespace runs one namespace's script: create its claims (and the Buckets the static ones
// import) and accesses, wait until they are provisioned (or not, for an early deletion), and
// delete what is not kept in the planned order, or the namespace whole.
func (r *run) namespace(ctx context.Context, p namespacePlan) error {
	if err := r.create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.name}}); err != nil {
		return err
	}
	claims := make([]*claimRecord, len(p.claims))
	claimObjs := make([]*cosiapi.BucketClaim, len(p.claims))
	for i, cp := range p.claims {
		claims[i] = &claimRecord{namespace: p.name, plan: cp}
		class := "chaos-delete"
		if cp.retain {
			class = "chaos-retain"
		}
		c := objects.BucketClaim(p.name, cp.name, class, objects.S3)
		if cp.static {
			c.Spec.BucketClassName = ""
			c.Spec.ExistingBucketName = cosiapi.ObjectName(cp.bucketName)
			b := objects.Bucket(cp.bucketName, r.driverName, cosiapi.DeletionPolicyRetain,
				objects.ClaimedBy(p.name, cp.name, ""), objects.BucketProtocols(cosiapi.ProtocolS3))
			b.Spec.ExistingBucketID = cp.staticID
			if err := r.create(ctx, b); err != nil {
				return err
			}
			claims[i].bucketName = cp.bucketName
		}
		if err := r.create(ctx, c); err != nil {
			return err
		}
		claimObjs[i] = c
		claims[i].uid = c.UID
		r.ledger.addClaim(claims[i])
		r.timeline.addf(claims[i].subjects(), "created claim %s/%s (%s)", p.name, cp.name, cp.describe())
	}
	accesses := make([]*accessRecord, len(p.access))
	accessObjs := make([]*cosiapi.BucketAccess, len(p.access))
	for i, ap := range p.access {
		class := "chaos"
		if ap.periodic {
			class = rotatingClass
		}
		a := objects.BucketAccess(p.name, ap.name, class)
		rec := &accessRecord{namespace: p.name, plan: ap}
		for _, ci := range ap.claims {
			objects.Grant(p.claims[ci].name, ap.name+"-"+p.claims[ci].name, objects.ReadWrite)(a)
			rec.claims = append(rec.claims, claims[ci])
		}
		if err := r.create(ctx, a); err != nil {
			return err
		}
		accessObjs[i] = a
		rec.uid = a.UID
		accesses[i] = rec
		r.ledger.addAccess(rec)
		r.timeline.addf(rec.subjects(), "created access %s/%s (%s)", p.name, ap.name, ap.describe(p))
	}

	if p.early {
		sleep(ctx, p.earlyAfter)
	} else if err := r.waitProvisioned(ctx, p.name, claims, accesses); err != nil {
		return err
	}
	if err := r.observe(ctx, p.name, claims, accesses); err != nil {
		return err
	}
	if err := r.askRotations(ctx, p, accesses, accessObjs); err != nil {
		return err
	}

	if p.deleteWhole {
		r.timeline.addf([]string{p.name}, "deleting namespace %s whole", p.name)
		return r.del(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.name}})
	}
	deleteAccesses := func(when func(accessPlan) bool) error {
		for i, a := range accesses {
			if !a.plan.keep && when(a.plan) {
				r.timeline.addf(a.subjects(), "deleting access %s/%s", p.name, a.plan.name)
				if err := r.del(ctx, accessObjs[i]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	claimsKept := func(a accessPlan) bool {
		for _, c := range a.claims {
			if !p.claims[c].keep {
				return false
			}
		}
		return true
	}
	if err := deleteAccesses(func(a accessPlan) bool { return a.order == before || claimsKept(a) }); err != nil {
		return err
	}
	sleep(ctx, p.gap)
	for i, c := range claims {
		if !c.plan.keep {
			r.timeline.addf(c.subjects(), "deleting claim %s/%s", p.name, c.plan.name)
			if err := r.del(ctx, claimObjs[i]); err != nil {
				return err
			}
		}
	}
	if err := deleteAccesses(func(a accessPlan) bool { return a.order == with && !claimsKept(a) }); err != nil {
		return err
	}
	sleep(ctx, p.gap)
	if err := deleteAccesses(func(a accessPlan) bool { return a.order == after && !claimsKept(a) }); err != nil {
		return err
	}
	for i, c := range claims {
		if c.plan.releaseBucket {
			if err := r.releaseBucket(ctx, c, claimObjs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// releaseBucket waits until a deleted Retain claim is gone and has the admin delete its Bucket:
// the backend bucket must stay (Retain).
func (r *run) releaseBucket(ctx context.Context, c *claimRecord, claim *cosiapi.BucketClaim) error {
	deadline := time.Now().Add(provisionPatience)
	for time.Now().Before(deadline) {
		err := r.get(ctx, claim)
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return err
		}
		sleep(ctx, 500*time.Millisecond)
	}
	r.ledger.mu.Lock()
	name := c.bucketName
	r.ledger.mu.Unlock()
	if name == "" {
		return nil // never bound: nothing to release
	}
	b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := r.get(ctx, b); err != nil {
		return client.IgnoreNotFound(err)
	}
	if b.Status.BucketID == "" || b.Spec.BucketClaimRef.UID != c.uid {
		return nil // not provisioned (nothing to keep), or not this claim's
	}
	r.ledger.release(b.Status.BucketID, b.Name)
	r.timeline.addf(c.subjects(b.Name, b.Status.BucketID), "admin deleting the retained Bucket %s", b.Name)
	return r.del(ctx, b)
}

// waitProvisioned waits until the namespace's claims and accesses are provisioned, or
// provisionPatience passed, recording what COSI gave them on the way.
func (r *run) waitProvisioned(
	ctx context.Context,
	ns string,
	claims []*claimRecord,
	accesses []*accessRecord,
) error {
	deadline := time.Now().Add(provisionPatience)
	for {
		done, err := r.provisioned(ctx, ns, claims, accesses)
		if err != nil || done || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// provisioned reports whether every claim and access of the namespace is provisioned.
func (r *run) provisioned(
	ctx context.Context,
	ns string,
	claims []*claimRecord,
	accesses []*accessRecord,
) (bool, error) {
	var cl cosiapi.BucketClaimList
	var al cosiapi.BucketAccessList
	if err := r.list(ctx, &cl, client.InNamespace(ns)); err != nil {
		return false, err
	}
	if err := r.list(ctx, &al, client.InNamespace(ns)); err != nil {
		return false, err
	}
	ready := map[types.UID]bool{}
	for _, c := range cl.Items {
		ready[c.UID] = meta.IsStatusConditionTrue(c.Status.Conditions, cosiapi.ConditionProvisioned)
	}
	for _, a := range al.Items {
		ready[a.UID] = meta.IsStatusConditionTrue(a.Status.Conditions, cosiapi.ConditionProvisioned)
	}
	for _, c := range claims {
		if !ready[c.uid] {
			return false, nil
		}
	}
	for _, a := range accesses {
		if !ready[a.uid] {
			return false, nil
		}
	}
	return true, nil
}

// observe records what COSI gave the namespace's objects so far: bound Buckets and their backend
// IDs, accounts, and the keys in the Secrets.
func (r *run) observe(ctx context.Context, ns string, claims []*claimRecord, accesses []*accessRecord) error {
	var cl cosiapi.BucketClaimList
	var al cosiapi.BucketAccessList
	var sl corev1.SecretList
	if err := r.list(ctx, &cl, client.InNamespace(ns)); err != nil {
		return err
	}
	if err := r.list(ctx, &al, client.InNamespace(ns)); err != nil {
		return err
	}
	if err := r.list(ctx, &sl, client.InNamespace(ns), client.HasLabels{cosiapi.LabelBucketAccessUID}); err != nil {
		return err
	}
	bound := map[types.UID]string{}
	for _, c := range cl.Items {
		bound[c.UID] = c.Status.BoundBucketName
	}
	for _, c := range claims {
		name := bound[c.uid]
		if name == "" {
			continue
		}
		b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := r.get(ctx, b); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.ledger.update(func() {
			c.bucketName = name
			if b.Status.BucketID != "" {
				c.bucketID = b.Status.BucketID
			}
		})
	}
	account := map[types.UID]string{}
	for _, a := range al.Items {
		account[a.UID] = a.Status.AccountID
	}
	for _, a := range accesses {
		if id := account[a.uid]; id != "" {
			r.ledger.update(func() { a.accountID = id })
		}
	}
	r.ledger.sawSecrets(sl.Items)
	return nil
}

// watchSecrets records the keys of the access Secrets every 300 ms until ctx ends, so that the
// keys that rotations and grants replace are known to the audit (a key held for less than that
// may go unseen). The API server's crashes make lists fail: the next one records.
func (r *run) watchSecrets(ctx context.Context) {
	for ctx.Err() == nil {
		var sl corev1.SecretList
		listCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.client.List(listCtx, &sl, client.HasLabels{cosiapi.LabelBucketAccessUID})
		cancel()
		if err == nil {
			r.ledger.sawSecrets(sl.Items)
		}
		if r.v1alpha1() {
			// The leak reports, before a namespace deleted whole takes them with it.
			listCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = r.sawLeakReports(listCtx)
			cancel()
		}
		sleep(ctx, 300*time.Millisecond)
	}
}

// askRotations asks, as the admin, for the rotations and Secret refreshes the plan has for the
// namespace's accesses: at once for the accesses to be deleted, which are then deleted
// midRotation later, half-way through their rotation; at their moments for the kept ones, in the
// background (the workload ends when they are asked).
func (r *run) askRotations(
	ctx context.Context, p namespacePlan, accesses []*accessRecord, objs []*cosiapi.BucketAccess,
) error {
	asked := false
	for i, a := range accesses {
		if a.plan.keep {
			r.asides.Add(1)
			go func() {
				defer r.asides.Done()
				start := time.Now()
				for _, step := range a.plan.steps() {
					sleep(ctx, time.Until(start.Add(step.at)))
					if err := r.ask(ctx, a, objs[i], step.annotation, step.token); err != nil {
						r.asideErr(fmt.Errorf("namespace %s: %w", p.name, err))
						return
					}
				}
			}()
			continue
		}
		for _, step := range a.plan.steps() {
			if err := r.ask(ctx, a, objs[i], step.annotation, step.token); err != nil {
				return err
			}
			asked = true
		}
	}
	if asked {
		sleep(ctx, p.midRotation)
	}
	return nil
}

// rotationStep is one request of the admin: a new value of annotation.
type rotationStep struct {
	at                time.Duration
	annotation, token string
}

// steps are the rotations and refreshes asked of the access, in order.
func (a accessPlan) steps() []rotationStep {
	var out []rotationStep
	for i, at := range a.rotations {
		out = append(out, rotationStep{at, cosiapi.AnnotationRotateCredentials, fmt.Sprintf("chaos-%d", i+1)})
	}
	for i, at := range a.refreshes {
		out = append(out, rotationStep{at, cosiapi.AnnotationRefreshSecret, fmt.Sprintf("chaos-%d", i+1)})
	}
	slices.SortStableFunc(out, func(x, y rotationStep) int { return int(x.at - y.at) })
	return out
}

// ask sets annotation to token on the access, as an admin does to ask for a rotation or a refresh.
func (r *run) ask(ctx context.Context, a *accessRecord, obj *cosiapi.BucketAccess, annotation, token string) error {
	what := "rotation"
	if annotation == cosiapi.AnnotationRefreshSecret {
		what = "Secret refresh"
	}
	state := "kept"
	if !a.plan.keep {
		state = "about to be deleted"
	}
	r.countRotation(fmt.Sprintf("%s asked by annotation (access %s)", what, state))
	r.timeline.addf(a.subjects(), "admin asks for a %s of access %s/%s (%s=%s)", what, a.namespace, a.plan.name,
		annotation, token)
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		annotation: token}}})
	if err != nil {
		return err
	}
	err = retry(ctx, "annotating "+obj.Name, func(ctx context.Context) error {
		return r.client.Patch(ctx, obj.DeepCopy(), client.RawPatch(types.MergePatchType, body))
	})
	if err = client.IgnoreNotFound(err); err != nil {
		return fmt.Errorf("annotating %s: %w", obj.Name, err)
	}
	return nil
}

func secretCredentials(s *corev1.Secret) *cosiproto.CredentialInfo {
	return &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{
		AccessKeyId:     string(s.Data[cosiapi.SecretKeyS3AccessKeyID]),
		AccessSecretKey: string(s.Data[cosiapi.SecretKeyS3SecretAccessKey]),
	}}
}

// subjects are what a claim's history is about: its UID, its Bucket, its backend bucket.
func (c *claimRecord) subjects(more ...string) []string {
	return append([]string{string(c.uid), c.bucketName, c.bucketID,
		cosiapi.BucketNamePrefix + string(c.uid), c.plan.staticID}, more...)
}

// subjects are what an access's history is about: its UID and its accounts.
func (a *accessRecord) subjects() []string {
	return append([]string{string(a.uid), a.accountID, cosiapi.AccountNamePrefix + string(a.uid)},
		a.driverAccounts...)
}

func (c claimPlan) describe() string {
	s := "Delete"
	if c.retain {
		s = "Retain"
	}
	if c.static {
		s += ", imports " + c.staticID
	}
	if c.keep {
		return s + ", kept"
	}
	if c.releaseBucket {
		s += ", its Bucket released after"
	}
	return s + ", deleted"
}

func (a accessPlan) describe(ns namespacePlan) string {
	s := "to"
	for _, c := range a.claims {
		s += " " + ns.claims[c].name
	}
	if a.keep {
		return s + ", kept"
	}
	return s + ", deleted " + a.order.String() + " its claims"
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
