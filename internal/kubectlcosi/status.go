package kubectlcosi

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// chain is what status reads: the objects, and the typed ones for the diagnosis.
type chain struct {
	report *StatusReport
	claims []*claimLink
	access []*accessLink
}

type claimLink struct {
	obj    *Object
	claim  *cosiapi.BucketClaim
	class  *Object
	bucket *Object
	b      *cosiapi.Bucket
}

type accessLink struct {
	obj     *Object
	access  *cosiapi.BucketAccess
	class   *Object
	secrets []*secretLink
}

type secretLink struct {
	obj    *Object
	secret *corev1.Secret
}

// StatusClaim prints the chain of the claim name: claim → Bucket → accesses → Secrets.
func (c *Command) StatusClaim(ctx context.Context, name string) error {
	ch := &chain{report: &StatusReport{Kind: "BucketClaim", Namespace: c.Namespace, Name: name}}
	cl, err := c.claim(ctx, ch, name)
	if err != nil {
		return err
	}
	if cl.claim != nil {
		var list cosiapi.BucketAccessList
		err := c.Client.List(ctx, &list, client.InNamespace(c.Namespace))
		switch v, err := classify(err); v {
		case visible:
			for i := range list.Items {
				ba := &list.Items[i]
				if slices.ContainsFunc(ba.Spec.BucketClaims,
					func(a cosiapi.BucketClaimAccess) bool { return a.BucketClaimName == name }) {
					if err := c.accessChain(ctx, ch, ba); err != nil {
						return err
					}
					if err := c.otherClaims(ctx, ch, ba); err != nil {
						return err
					}
				}
			}
		case forbidden:
			ch.report.NotVisible = append(ch.report.NotVisible,
				"the BucketAccesses of namespace "+c.Namespace+" (needs list on bucketaccesses)")
		default:
			return err
		}
	}
	ch.report.Diagnosis = c.diagnoseClaimChain(ch)
	return c.print(ch.report, printStatus(ch.report, c.Now()))
}

// StatusAccess prints the chain of the access name: access → claims → Buckets, and its Secrets.
func (c *Command) StatusAccess(ctx context.Context, name string) error {
	ch := &chain{report: &StatusReport{Kind: "BucketAccess", Namespace: c.Namespace, Name: name}}
	ba := &cosiapi.BucketAccess{}
	o := newObject("BucketAccess", c.Namespace, name)
	v, err := c.read(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, ba)
	if err != nil {
		return err
	}
	o.Visibility = v
	if v != visible {
		ch.report.Objects = append(ch.report.Objects, o)
		ch.access = append(ch.access, &accessLink{obj: o})
		ch.report.Diagnosis = c.diagnoseAccessChain(ch)
		return c.print(ch.report, printStatus(ch.report, c.Now()))
	}
	if err := c.accessChain(ctx, ch, ba); err != nil {
		return err
	}
	for _, claim := range ba.Spec.BucketClaims {
		if _, err := c.claim(ctx, ch, claim.BucketClaimName); err != nil {
			return err
		}
	}
	ch.report.Diagnosis = c.diagnoseAccessChain(ch)
	return c.print(ch.report, printStatus(ch.report, c.Now()))
}

// otherClaims reads the claims of an access that is not granted yet and that the chain lacks:
// the access may wait for one of them.
func (c *Command) otherClaims(ctx context.Context, ch *chain, ba *cosiapi.BucketAccess) error {
	if p := findCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned); p != nil &&
		p.Status == metav1.ConditionTrue {
		return nil
	}
	for _, ref := range ba.Spec.BucketClaims {
		if ch.claimNamed(ref.BucketClaimName) == nil {
			if _, err := c.claim(ctx, ch, ref.BucketClaimName); err != nil {
				return err
			}
		}
	}
	return nil
}

func (ch *chain) claimNamed(name string) *claimLink {
	i := slices.IndexFunc(ch.claims, func(l *claimLink) bool { return l.obj.Name == name })
	if i < 0 {
		return nil
	}
	return ch.claims[i]
}

// claim reads the claim name, its class and its Bucket into the chain.
func (c *Command) claim(ctx context.Context, ch *chain, name string) (*claimLink, error) {
	l := &claimLink{obj: newObject("BucketClaim", c.Namespace, name)}
	ch.claims = append(ch.claims, l)
	ch.report.Objects = append(ch.report.Objects, l.obj)
	claim := &cosiapi.BucketClaim{}
	v, err := c.read(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, claim)
	if err != nil {
		return nil, err
	}
	l.obj.Visibility = v
	if v != visible {
		return l, nil
	}
	l.claim = claim
	l.obj.fill(claim, claim.Status.Conditions)
	if claim.Spec.ExistingBucketName != "" {
		l.obj.Details = append(l.obj.Details, "static: existing Bucket "+claim.Spec.ExistingBucketName)
	} else {
		l.obj.Details = append(l.obj.Details, "BucketClass: "+claim.Spec.BucketClassName)
	}
	c.events(ctx, l.obj)

	if claim.Spec.ExistingBucketName == "" && claim.Spec.BucketClassName != "" {
		class := &cosiapi.BucketClass{}
		l.class = newObject("BucketClass", "", claim.Spec.BucketClassName)
		if l.class.Visibility, err = c.read(ctx, types.NamespacedName{Name: claim.Spec.BucketClassName}, class); err != nil {
			return nil, err
		}
		if l.class.Visibility == visible {
			l.class.Details = append(l.class.Details, "driver: "+class.Spec.DriverName,
				"deletionPolicy: "+string(class.Spec.DeletionPolicy))
		}
	}

	bucketName := claim.Status.BoundBucketName
	if claim.Spec.ExistingBucketName != "" {
		bucketName = claim.Spec.ExistingBucketName
	}
	if bucketName == "" {
		return l, nil
	}
	l.bucket = newObject("Bucket", "", bucketName)
	ch.report.Objects = append(ch.report.Objects, l.bucket)
	b := &cosiapi.Bucket{}
	if l.bucket.Visibility, err = c.read(ctx, types.NamespacedName{Name: bucketName}, b); err != nil {
		return nil, err
	}
	switch l.bucket.Visibility {
	case visible:
		l.b = b
		l.bucket.fill(b, b.Status.Conditions)
		l.bucket.Details = append(l.bucket.Details, "driver: "+b.Spec.DriverName,
			"deletionPolicy: "+string(b.Spec.DeletionPolicy))
		if b.Status.BucketID != "" {
			l.bucket.Details = append(l.bucket.Details, "bucketID: "+b.Status.BucketID)
		}
		if u := b.Status.Usage; u != nil {
			l.bucket.Details = append(l.bucket.Details, usageDetail(u))
		}
		c.events(ctx, l.bucket)
	case forbidden:
		ch.report.NotVisible = append(ch.report.NotVisible, "Bucket "+bucketName+
			" (cluster-scoped: an admin can run kubectl cosi status with more rights, or kubectl describe bucket)")
	}
	if l.class != nil && l.class.Visibility == forbidden {
		ch.report.NotVisible = append(ch.report.NotVisible, "BucketClass "+l.class.Name+" (cluster-scoped)")
	}
	return l, nil
}

// accessChain reads the access, its class and its Secrets into the chain.
func (c *Command) accessChain(ctx context.Context, ch *chain, ba *cosiapi.BucketAccess) error {
	l := &accessLink{obj: newObject("BucketAccess", ba.Namespace, ba.Name), access: ba}
	l.obj.Visibility = visible
	ch.access = append(ch.access, l)
	ch.report.Objects = append(ch.report.Objects, l.obj)
	l.obj.fill(ba, ba.Status.Conditions)
	l.obj.Details = append(l.obj.Details, "BucketAccessClass: "+ba.Spec.BucketAccessClassName,
		"protocol: "+string(ba.Spec.Protocol))
	if ba.Status.DriverName != "" {
		l.obj.Details = append(l.obj.Details, "handed off to driver "+ba.Status.DriverName)
	}
	c.events(ctx, l.obj)
	if ba.Spec.BucketAccessClassName != "" {
		class := &cosiapi.BucketAccessClass{}
		l.class = newObject("BucketAccessClass", "", ba.Spec.BucketAccessClassName)
		v, err := c.read(ctx, types.NamespacedName{Name: ba.Spec.BucketAccessClassName}, class)
		if err != nil {
			return err
		}
		l.class.Visibility = v
	}
	for _, claim := range ba.Spec.BucketClaims {
		s := &corev1.Secret{}
		sl := &secretLink{obj: newObject("Secret", ba.Namespace, claim.AccessSecretName)}
		v, err := c.read(ctx, types.NamespacedName{Namespace: ba.Namespace, Name: claim.AccessSecretName}, s)
		if err != nil {
			return err
		}
		sl.obj.Visibility = v
		switch v {
		case visible:
			sl.secret = s
			sl.obj.fill(s, nil)
			sl.obj.Details = append(sl.obj.Details, "for BucketClaim "+claim.BucketClaimName)
			if s.Labels[cosiapi.LabelBucketAccessUID] != string(ba.UID) {
				sl.obj.Details = append(sl.obj.Details, "NOT written by COSI for this BucketAccess (no matching "+
					cosiapi.LabelBucketAccessUID+" label)")
			}
			sl.obj.Details = append(sl.obj.Details, "keys: "+strings.Join(sortedKeys(s.Data), ", "))
		case notFound:
			sl.obj.Details = append(sl.obj.Details, "for BucketClaim "+claim.BucketClaimName)
		case forbidden:
			ch.report.NotVisible = append(ch.report.NotVisible, "Secret "+ba.Namespace+"/"+claim.AccessSecretName+
				" (needs get on secrets)")
		}
		l.secrets = append(l.secrets, sl)
		ch.report.Objects = append(ch.report.Objects, sl.obj)
	}
	return nil
}

// diagnoseClaimChain finds the first thing that keeps the claim's chain from being done.
func (c *Command) diagnoseClaimChain(ch *chain) Diagnosis {
	l := ch.claims[0]
	if d, done := c.diagnoseClaim(l); !done {
		d.finish()
		return d
	}
	for _, a := range ch.access {
		if d, done := c.diagnoseAccess(a); !done {
			if cd, ok := c.waitedClaim(ch, a); d.waits && ok {
				d = cd
			}
			d.finish()
			return d
		}
	}
	d := Diagnosis{Ready: true, Who: WhoNobody,
		Problem: fmt.Sprintf("BucketClaim %s is provisioned (Bucket %s)", l.obj.Name, l.claim.Status.BoundBucketName)}
	switch n := len(ch.access); {
	case slices.Contains(ch.report.NotVisible, "the BucketAccesses of namespace "+c.Namespace+
		" (needs list on bucketaccesses)"):
	case n == 0:
		d.Problem += " and no BucketAccess uses it yet"
		d.Next = "create a BucketAccess to get credentials"
	default:
		d.Problem += fmt.Sprintf(" and its %d BucketAccess(es) are granted with their Secrets written", n)
	}
	d.finish()
	return d
}

// diagnoseAccessChain finds the first thing that keeps the access from being done.
func (c *Command) diagnoseAccessChain(ch *chain) Diagnosis {
	a := ch.access[0]
	d, done := c.diagnoseAccess(a)
	if cd, ok := c.waitedClaim(ch, a); !done && d.waits && ok {
		d = cd
	}
	if done {
		d = Diagnosis{Ready: true, Who: WhoNobody, Problem: fmt.Sprintf(
			"BucketAccess %s is granted and its Secrets are written; a Pod can use them with envFrom "+
				"(kubectl cosi env %s)", a.obj.Name, a.obj.Name)}
	}
	d.finish()
	return d
}

// waitedClaim says why the first of an access's claims that is not provisioned is not, when the
// chain holds one.
func (c *Command) waitedClaim(ch *chain, a *accessLink) (Diagnosis, bool) {
	for _, ref := range a.access.Spec.BucketClaims {
		l := ch.claimNamed(ref.BucketClaimName)
		if l == nil {
			continue
		}
		if cd, done := c.diagnoseClaim(l); !done {
			cd.Problem = fmt.Sprintf("BucketAccess %s waits for BucketClaim %s: %s", a.obj.Name, l.obj.Name, cd.Problem)
			return cd, true
		}
	}
	return Diagnosis{}, false
}

// diagnoseClaim says what keeps a claim from being provisioned; done when nothing does.
func (c *Command) diagnoseClaim(l *claimLink) (Diagnosis, bool) {
	switch l.obj.Visibility {
	case notFound:
		return Diagnosis{Problem: fmt.Sprintf("BucketClaim %s/%s does not exist", c.Namespace, l.obj.Name),
			Who: WhoUser, Action: "create it, or check the name and the namespace (-n)"}, false
	case forbidden:
		return Diagnosis{Problem: fmt.Sprintf("you may not read BucketClaim %s/%s", c.Namespace, l.obj.Name),
			Who: WhoAdmin, Action: "grant you get on bucketclaims in the namespace"}, false
	}
	claim := l.claim
	prov := l.obj.condition(cosiapi.ConditionProvisioned)
	rv := l.obj.condition(cosiapi.ConditionResourcesValidated)
	pf := l.obj.condition(cosiapi.ConditionProvisionFailed)
	if claim.DeletionTimestamp != nil {
		return c.claimDeleting(l, prov), false
	}
	// A provisioned claim no longer needs its class: an admin may have deleted it since.
	if l.class != nil && l.class.Visibility == notFound && (prov == nil || prov.Status != metav1.ConditionTrue) {
		return Diagnosis{
			Problem: fmt.Sprintf("BucketClaim %s waits for BucketClass %s, which does not exist", claim.Name,
				claim.Spec.BucketClassName),
			Who: WhoAdmin,
			Action: fmt.Sprintf("create BucketClass %s (or you recreate the claim with an existing class)",
				claim.Spec.BucketClassName),
			Next: "COSI creates the Bucket on its own as soon as the class exists",
		}, false
	}
	if rv != nil && rv.Status == metav1.ConditionFalse {
		return reasonDiagnosis("BucketClaim "+claim.Name, rv, ""), false
	}
	if pf != nil && pf.Status == metav1.ConditionTrue {
		if prov != nil && prov.Status == metav1.ConditionFalse {
			return reasonDiagnosis("BucketClaim "+claim.Name, prov, ""), false
		}
		return reasonDiagnosis("BucketClaim "+claim.Name, pf, c.retryNext(l.bucket, cosiapi.EventFailedCreateBucket)), false
	}
	if prov != nil && prov.Status == metav1.ConditionTrue {
		return Diagnosis{}, true
	}
	if prov != nil && prov.Status == metav1.ConditionFalse {
		return reasonDiagnosis("BucketClaim "+claim.Name, prov, ""), false
	}
	if rv != nil && rv.Reason == cosiapi.ReasonWaitingForResources {
		return reasonDiagnosis("BucketClaim "+claim.Name, rv, "COSI continues on its own once it exists"), false
	}
	if prov != nil && prov.Reason == cosiapi.ReasonWaitingForDriver {
		d := reasonDiagnosis("BucketClaim "+claim.Name, prov, "")
		d.Problem = strings.TrimSuffix(d.Problem, "; Bucket "+claim.Status.BoundBucketName+
			" is provisioned as soon as a sidecar of the driver runs")
		d.Next = "the Bucket is provisioned on its own as soon as a sidecar of the driver runs"
		return d, false
	}
	if l.bucket != nil && l.b != nil {
		if bp := l.bucket.condition(cosiapi.ConditionProvisioned); bp == nil && len(l.b.Finalizers) == 0 {
			return Diagnosis{
				Problem: fmt.Sprintf("no sidecar has picked up Bucket %s: no sidecar of driver %s seems to run",
					l.b.Name, l.b.Spec.DriverName),
				Who:    WhoAdmin,
				Action: fmt.Sprintf("deploy or restart the sidecar and driver %s (kubectl cosi doctor)", l.b.Spec.DriverName),
				Next:   "the Bucket is provisioned as soon as a sidecar of the driver runs",
			}, false
		}
	}
	msg := "provisioning is in progress"
	if prov != nil && prov.Message != "" {
		msg = prov.Message
	}
	return Diagnosis{
		Problem: fmt.Sprintf("BucketClaim %s is not provisioned yet (%s)", claim.Name, msg),
		Who:     WhoNobody,
		Next:    "the driver's sidecar provisions it; if this lasts, an admin checks the sidecar (kubectl cosi doctor)",
	}, false
}

func (c *Command) claimDeleting(l *claimLink, prov *metav1.Condition) Diagnosis {
	subject := "BucketClaim " + l.obj.Name + " is being deleted"
	if d, held := heldByOthers(subject, l.claim); held {
		return d
	}
	d := Diagnosis{Problem: subject, Who: WhoNobody, Next: "it goes once its Bucket is handled"}
	if prov != nil && (prov.Reason == cosiapi.ReasonDeletionBlocked || prov.Reason == cosiapi.ReasonDeleting) {
		d = reasonDiagnosis(subject, prov, "")
	}
	d.Next = thenHeldByOthers(d.Next, l.claim)
	return d
}

// heldByOthers diagnoses an object being deleted that COSI is done with (its finalizer is gone)
// and that finalizers of others still hold: nothing of COSI's will release it.
func heldByOthers(subject string, obj client.Object) (Diagnosis, bool) {
	if controllerutil.ContainsFinalizer(obj, cosiapi.FinalizerProtection) || len(obj.GetFinalizers()) == 0 {
		return Diagnosis{}, false
	}
	return Diagnosis{
		Problem: fmt.Sprintf("%s and COSI is done with it, but finalizers %v, which are not COSI's, hold it", subject,
			obj.GetFinalizers()),
		Who:    WhoAdmin,
		Action: "remove those finalizers, or fix whoever owns them",
	}, true
}

// thenHeldByOthers adds to next that finalizers of others will still hold obj once COSI is done.
func thenHeldByOthers(next string, obj client.Object) string {
	others := slices.DeleteFunc(slices.Clone(obj.GetFinalizers()),
		func(f string) bool { return f == cosiapi.FinalizerProtection })
	if len(others) == 0 {
		return next
	}
	then := fmt.Sprintf("then finalizers %v, which are not COSI's, still hold it", others)
	if next == "" {
		return then
	}
	return next + "; " + then
}

// reasonDiagnosis turns a condition into a diagnosis with the reason's explanation.
func reasonDiagnosis(subject string, cond *metav1.Condition, next string) Diagnosis {
	e, _ := explain(cond.Reason)
	problem := fmt.Sprintf("%s: %s (%s)", subject, e.Meaning, cond.Reason)
	if cond.Message != "" {
		problem = fmt.Sprintf("%s: %s", subject, strings.TrimSuffix(cond.Message, "."))
	}
	if e.Meaning == "" {
		e = Explanation{Who: WhoAdmin, Action: "read the message (reason " + cond.Reason + ", unknown to this plugin)"}
	}
	return Diagnosis{Problem: problem, Who: e.Who, Action: e.Action, Next: next}
}

// retryNext says when the sidecar tries a failing driver call again, from the object's latest
// event of reason (a failure of that call): at most maxBackoff later. When that time has passed
// without a newer failure, nothing retried: it says so, and who looks.
func (c *Command) retryNext(o *Object, reason string) string {
	const backoff = "the sidecar retries with backoff, at most 5 minutes apart, unless the error is final"
	if o == nil {
		return backoff
	}
	for _, e := range o.Events {
		if e.Type != corev1.EventTypeWarning || e.Reason != reason {
			continue
		}
		now := c.Now()
		at := e.Last.Add(maxBackoff)
		if at.Before(now) {
			return fmt.Sprintf("the sidecar should have retried by %s and did not: unless the error is final, an "+
				"admin checks that the driver's sidecar runs (kubectl cosi doctor)", clock(at, now))
		}
		return fmt.Sprintf("the sidecar retries with backoff, at the latest at %s, unless the error is final", clock(at, now))
	}
	return backoff
}

// clock writes t for a sentence: the time of day, and the date too when it is not today.
func clock(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	if ty, tm, td := t.Date(); ty == now.Year() && tm == now.Month() && td == now.Day() {
		return t.Format("15:04")
	}
	return t.Format("2006-01-02 15:04")
}

// maxBackoff is requeue.MaxBackoff, the longest wait between two attempts.
const maxBackoff = 5 * time.Minute

// diagnoseAccess says what keeps an access from being granted with its Secrets written.
func (c *Command) diagnoseAccess(a *accessLink) (Diagnosis, bool) {
	switch a.obj.Visibility {
	case notFound:
		return Diagnosis{Problem: fmt.Sprintf("BucketAccess %s/%s does not exist", c.Namespace, a.obj.Name),
			Who: WhoUser, Action: "create it, or check the name and the namespace (-n)"}, false
	case forbidden:
		return Diagnosis{Problem: fmt.Sprintf("you may not read BucketAccess %s/%s", c.Namespace, a.obj.Name),
			Who: WhoAdmin, Action: "grant you get on bucketaccesses in the namespace"}, false
	}
	ba := a.access
	subject := "BucketAccess " + ba.Name
	prov := a.obj.condition(cosiapi.ConditionProvisioned)
	rv := a.obj.condition(cosiapi.ConditionResourcesValidated)
	pf := a.obj.condition(cosiapi.ConditionProvisionFailed)
	if ba.DeletionTimestamp != nil {
		if d, held := heldByOthers(subject+" is being deleted", ba); held {
			return d, false
		}
		d := Diagnosis{Problem: subject + " is being deleted: its Secrets are deleted and the access revoked",
			Who: WhoNobody, Next: c.retryNext(a.obj, cosiapi.EventFailedRevokeAccess)}
		if prov != nil && prov.Reason == cosiapi.ReasonRevoked {
			d = reasonDiagnosis(subject+" is being deleted", prov, "the controller removes its finalizer")
		}
		d.Next = thenHeldByOthers(d.Next, ba)
		return d, false
	}
	// A granted access no longer needs its class: an admin may have deleted it since.
	if a.class != nil && a.class.Visibility == notFound && (prov == nil || prov.Status != metav1.ConditionTrue) {
		return Diagnosis{
			Problem: fmt.Sprintf("%s waits for BucketAccessClass %s, which does not exist", subject,
				ba.Spec.BucketAccessClassName),
			Who: WhoAdmin,
			Action: fmt.Sprintf("create BucketAccessClass %s (or you recreate the access with an existing class)",
				ba.Spec.BucketAccessClassName),
			Next: "COSI continues on its own as soon as the class exists",
		}, false
	}
	if rv != nil && rv.Status == metav1.ConditionFalse {
		next := ""
		switch rv.Reason {
		case cosiapi.ReasonSecretConflict:
			next = "the sidecar looks again every few seconds and grants the access once the Secret is gone"
		case cosiapi.ReasonSecretWriteFailed:
			next = c.retryNext(a.obj, cosiapi.EventFailedGrantAccess)
		}
		return reasonDiagnosis(subject, rv, next), false
	}
	if prov != nil && prov.Status == metav1.ConditionFalse {
		return reasonDiagnosis(subject, prov, ""), false
	}
	if pf != nil && pf.Status == metav1.ConditionTrue {
		return reasonDiagnosis(subject, pf, c.retryNext(a.obj, cosiapi.EventFailedGrantAccess)), false
	}
	if prov == nil || prov.Status != metav1.ConditionTrue {
		if prov != nil && prov.Reason == cosiapi.ReasonWaitingForResources {
			// The claims it waits for say why (waitedClaim), when the chain holds them.
			return Diagnosis{Problem: fmt.Sprintf("%s: %s", subject, strings.TrimSuffix(prov.Message, ".")),
				Who: WhoNobody, Next: "COSI continues on its own once it is ready", waits: true}, false
		}
		if prov != nil && prov.Reason == cosiapi.ReasonWaitingForDriver {
			d := reasonDiagnosis(subject, prov, "")
			d.Problem = strings.TrimSuffix(d.Problem, "; the access is granted as soon as a sidecar of the driver runs")
			d.Next = "the access is granted on its own as soon as a sidecar of the driver runs"
			return d, false
		}
		if ba.Status.DriverName == "" {
			return Diagnosis{Problem: subject + " is not handed off to a driver yet", Who: WhoNobody,
				Next: "the COSI controller hands it off; if this lasts, an admin checks the controller " +
					"(kubectl cosi doctor)"}, false
		}
		return Diagnosis{Problem: fmt.Sprintf("%s is being granted by driver %s", subject, ba.Status.DriverName),
			Who: WhoNobody, Next: "if this lasts, an admin checks the driver's sidecar (kubectl cosi doctor)"}, false
	}
	for _, s := range a.secrets {
		if d, ok := c.diagnoseSecret(ba, s); !ok {
			return d, false
		}
	}
	return Diagnosis{}, true
}

// checkDeadline is when the sidecar's Secret check of an access writes a Secret lost at from again
// at the latest: its next check is due within interval, and the sidecar's rate limit on checks
// may hold a due check for up to half an interval more (after heavy provisioning; docs/sidecar.md,
// "Checks are spread").
func checkDeadline(from time.Time, interval time.Duration) time.Time {
	return from.Add(interval + interval/2)
}

// diagnoseSecret says what is wrong with a Secret of a provisioned access.
func (c *Command) diagnoseSecret(ba *cosiapi.BucketAccess, s *secretLink) (Diagnosis, bool) {
	// latest says when the sidecar's next Secret check writes the Secret again at the latest
	// (checkDeadline). When that time has passed, the check did not happen: an admin looks.
	latest := func(d Diagnosis, from time.Time) Diagnosis {
		interval := c.SecretCheckInterval
		if s.secret != nil {
			interval = c.checkInterval(s.secret.Annotations)
		}
		now := c.Now()
		at := checkDeadline(from, interval)
		if at.Before(now) {
			d.Who, d.Action = WhoAdmin, fmt.Sprintf("check that a sidecar of driver %s runs (kubectl cosi doctor)",
				ba.Status.DriverName)
			d.Next = fmt.Sprintf("the sidecar should have written it again at its Secret check by %s (every %s) and "+
				"did not", clock(at, now), interval)
			return d
		}
		d.Next = fmt.Sprintf("the sidecar writes it again at its next Secret check, at the latest at %s "+
			"(every %s; it cannot watch Secrets)", clock(at, now), interval)
		return d
	}
	switch {
	case s.obj.Visibility == notFound:
		return latest(Diagnosis{Problem: fmt.Sprintf("Secret %s of BucketAccess %s is missing", s.obj.Name, ba.Name),
			Who: WhoNobody}, c.Now()), false
	case s.obj.Visibility != visible:
		return Diagnosis{}, true
	case s.secret.DeletionTimestamp != nil:
		others := slices.DeleteFunc(slices.Clone(s.secret.Finalizers),
			func(f string) bool { return f == cosiapi.FinalizerProtection })
		if len(others) > 0 {
			return Diagnosis{Problem: fmt.Sprintf("Secret %s of BucketAccess %s was deleted and is held by finalizers %v",
				s.obj.Name, ba.Name, others), Who: WhoAdmin, Action: "remove those finalizers or fix whoever owns them",
				Next: "the sidecar writes it again once it is gone"}, false
		}
		return latest(Diagnosis{Problem: fmt.Sprintf("Secret %s of BucketAccess %s was deleted at %s and COSI's "+
			"finalizer keeps it (kubectl delete waits) until the sidecar replaces it", s.obj.Name, ba.Name,
			clock(s.secret.DeletionTimestamp.Time, c.Now())), Who: WhoNobody}, s.secret.DeletionTimestamp.Time), false
	case s.secret.Labels[cosiapi.LabelBucketAccessUID] != string(ba.UID):
		return Diagnosis{Problem: fmt.Sprintf("Secret %s was not written by COSI for BucketAccess %s", s.obj.Name, ba.Name),
			Who: WhoUser, Action: "delete or rename that Secret", Next: "the sidecar writes its own once it is gone"}, false
	}
	// Someone removed a key that COSI wrote: the sidecar's next check finds the same.
	if missing := sidecar.MissingSecretKeys(s.secret, ba.Status.AuthenticationType); len(missing) > 0 {
		return latest(Diagnosis{Problem: fmt.Sprintf("Secret %s of BucketAccess %s lacks %s, which COSI wrote into "+
			"it: a Pod does not get working credentials from it", s.obj.Name, ba.Name, strings.Join(missing, ", ")),
			Who: WhoNobody}, c.Now()), false
	}
	return Diagnosis{}, true
}

// checkInterval is the Secret check interval that the sidecar wrote on a Secret, else the
// --secret-check-interval flag.
func (c *Command) checkInterval(annotations map[string]string) time.Duration {
	if d, err := time.ParseDuration(annotations[cosiapi.AnnotationSecretCheckInterval]); err == nil && d > 0 {
		return d
	}
	return c.SecretCheckInterval
}

// usageDetail says what a Bucket holds and how much of its quota that is.
func usageDetail(u *cosiapi.BucketUsage) string {
	d := fmt.Sprintf("usage: %s in %d objects", bytesOf(u.SizeBytes), u.ObjectCount)
	var quota []string
	if u.MaxSizeBytes != nil {
		quota = append(quota, fmt.Sprintf("%s (%s used)", bytesOf(*u.MaxSizeBytes), percent(u.SizeBytes, *u.MaxSizeBytes)))
	}
	if u.MaxObjectCount != nil {
		quota = append(quota,
			fmt.Sprintf("%d objects (%s used)", *u.MaxObjectCount, percent(u.ObjectCount, *u.MaxObjectCount)))
	}
	if len(quota) == 0 {
		return d + "; no quota"
	}
	return d + "; quota: " + strings.Join(quota, ", ")
}

// bytesOf is n in the largest binary unit that keeps it at 1 or more (1.5 GiB).
func bytesOf(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	// The unit is chosen on the figure as printed: 1 MiB less a byte is 1.0 MiB, not 1024.0 KiB.
	for math.Round(v*10)/10 >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i:i+1] + "iB"
}

// percent is used of limit in whole percent; a limit of zero is full.
func percent(used, limit int64) string {
	if limit <= 0 {
		return "100%"
	}
	// In floating point throughout: a bucket far past a limit (one set outside COSI) overflows an
	// int64 percentage (TestAttack44UsageDetailOddValues).
	return fmt.Sprintf("%.0f%%", math.Floor(float64(used)*100/float64(limit)))
}
