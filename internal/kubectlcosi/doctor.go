package kubectlcosi

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/controller"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// Check statuses.
const (
	CheckOK      = "ok"
	CheckFailed  = "failed"
	CheckWarning = "warning"
	// CheckUnknown: the check could not read what it needs (Forbidden).
	CheckUnknown = "unknown"
)

// Check is one finding of doctor.
type Check struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

// DoctorReport is the output of doctor.
type DoctorReport struct {
	Checks []Check `json:"checks"`
}

func (r *DoctorReport) add(name, status, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Name: name, Status: status, Message: fmt.Sprintf(format, args...)})
}

// CRDNames are COSI's CustomResourceDefinitions, by kind.
var CRDNames = map[string]string{
	"BucketClass":       "bucketclasses." + cosiapi.GroupName,
	"BucketAccessClass": "bucketaccessclasses." + cosiapi.GroupName,
	"BucketClaim":       "bucketclaims." + cosiapi.GroupName,
	"Bucket":            "buckets." + cosiapi.GroupName,
	"BucketAccess":      "bucketaccesses." + cosiapi.GroupName,
}

// AdmissionPolicies are the ValidatingAdmissionPolicies of config/admission (a test checks the
// list against the files).
var AdmissionPolicies = []string{
	"cosi-allowed-classes",
	"cosi-reserved-bucket-metadata",
	"cosi-reserved-metadata",
	"cosi-reserved-secrets",
	"cosi-reserved-status",
	"cosi-sidecar-secrets",
}

// V1alpha1BucketViewPolicy is the ValidatingAdmissionPolicy of config/components/v1alpha1-bucket-view
// that refuses every write through the read-only v1alpha1 view of the Buckets (a test checks the
// name against the file).
const V1alpha1BucketViewPolicy = "cosi-v1alpha1-bucket-view"

// Doctor checks the installation and reports whether a check failed.
func (c *Command) Doctor(ctx context.Context) (bool, error) {
	r := &DoctorReport{}
	steps := []func(context.Context, *DoctorReport) error{
		c.checkCRDs, c.checkAdmission, c.checkComponents, c.checkStuck, c.checkSecrets, c.checkKeyless,
	}
	for _, step := range steps {
		if err := step(ctx, r); err != nil {
			return false, err
		}
	}
	failedChecks := slices.ContainsFunc(r.Checks, func(ch Check) bool { return ch.Status == CheckFailed })
	return failedChecks, c.print(r, func(w io.Writer) {
		for _, ch := range r.Checks {
			fmt.Fprintf(w, "%-8s %-22s %s\n", strings.ToUpper(ch.Status), printable(ch.Name), printable(ch.Message))
		}
	})
}

// checkCRDs: every CRD installed, serving and storing v1alpha2; v1alpha1 objects left to migrate.
func (c *Command) checkCRDs(ctx context.Context, r *DoctorReport) error {
	for _, kind := range slices.Sorted(maps.Keys(CRDNames)) {
		name := CRDNames[kind]
		crd := &apiextensionsv1.CustomResourceDefinition{}
		v, err := c.read(ctx, types.NamespacedName{Name: name}, crd)
		if err != nil {
			return err
		}
		check := "crd/" + kind
		switch v {
		case forbidden:
			r.add(check, CheckUnknown, "cannot read CRD %s (Forbidden)", name)
			continue
		case notFound:
			r.add(check, CheckFailed, "CRD %s is not installed (config/crd/bases)", name)
			continue
		}
		var served, storage bool
		var others []string
		for _, ver := range crd.Spec.Versions {
			if ver.Name == cosiapi.SchemeGroupVersion.Version {
				served, storage = ver.Served, ver.Storage
			} else if ver.Served {
				others = append(others, ver.Name)
			}
		}
		switch {
		case !served || !storage:
			r.add(check, CheckFailed, "CRD %s does not serve and store %s (it serves %v): an older COSI is installed; "+
				"migrate (docs/v1alpha1-drivers.md)", name, cosiapi.SchemeGroupVersion.Version, others)
		default:
			r.add(check, CheckOK, "CRD %s serves and stores %s", name, cosiapi.SchemeGroupVersion.Version)
		}
		v1alpha1Stored := slices.Contains(crd.Status.StoredVersions, "v1alpha1")
		switch {
		case kind == "Bucket" && served && storage && slices.Contains(others, "v1alpha1") && !v1alpha1Stored:
			// v1alpha1 served over the objects stored as v1alpha2: a view of the same objects
			// (config/components/v1alpha1-bucket-view), not objects left to migrate.
			if err := c.checkV1alpha1View(ctx, r, name); err != nil {
				return err
			}
		case slices.Contains(others, "v1alpha1") || v1alpha1Stored:
			if err := c.checkV1alpha1(ctx, r, kind); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkV1alpha1View: the Bucket CRD serves v1alpha1 over its v1alpha2 objects, with no
// conversion (config/components/v1alpha1-bucket-view). Writes through v1alpha1 would skip
// v1alpha2's validation, and a v1alpha1 delete deletes the Bucket: its policy must refuse them.
func (c *Command) checkV1alpha1View(ctx context.Context, r *DoctorReport, crd string) error {
	const check = "v1alpha1/Bucket"
	var bindings admissionv1.ValidatingAdmissionPolicyBindingList
	v, err := classify(c.Client.List(ctx, &bindings))
	if v == failed {
		return err
	}
	if v == forbidden {
		r.add(check, CheckUnknown, "CRD %s serves v1alpha1 as a view of its v1alpha2 objects; cannot list "+
			"ValidatingAdmissionPolicyBindings (Forbidden) to check that writes through it are refused", crd)
		return nil
	}
	state, err := c.admissionPolicy(ctx, V1alpha1BucketViewPolicy, bindings.Items)
	if err != nil {
		return err
	}
	const what = "writes through v1alpha1 skip v1alpha2's validation, and a v1alpha1 delete deletes the Bucket " +
		"(config/components/v1alpha1-bucket-view)"
	switch state {
	case policyForbidden:
		r.add(check, CheckUnknown, "CRD %s serves v1alpha1 as a view of its v1alpha2 objects; cannot read "+
			"ValidatingAdmissionPolicy %s (Forbidden)", crd, V1alpha1BucketViewPolicy)
	case policyMissing:
		r.add(check, CheckFailed, "CRD %s serves v1alpha1 as a view of its v1alpha2 objects, but "+
			"ValidatingAdmissionPolicy %s is not installed: %s", crd, V1alpha1BucketViewPolicy, what)
	case policyUnbound:
		r.add(check, CheckFailed, "CRD %s serves v1alpha1 as a view of its v1alpha2 objects, but "+
			"ValidatingAdmissionPolicy %s is not bound: %s", crd, V1alpha1BucketViewPolicy, what)
	case policyNotDenying:
		r.add(check, CheckFailed, "CRD %s serves v1alpha1 as a view of its v1alpha2 objects, but "+
			"ValidatingAdmissionPolicy %s is bound without validationActions Deny: %s", crd,
			V1alpha1BucketViewPolicy, what)
	default:
		r.add(check, CheckOK, "CRD %s serves v1alpha1 as a read-only view of its v1alpha2 objects "+
			"(ValidatingAdmissionPolicy %s is installed and bound): nothing to migrate", crd, V1alpha1BucketViewPolicy)
	}
	return nil
}

// checkV1alpha1 counts the v1alpha1 objects of kind that are left to migrate.
func (c *Command) checkV1alpha1(ctx context.Context, r *DoctorReport, kind string) error {
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(cosiapi.GroupName + "/v1alpha1")
	l.SetKind(kind + "List")
	v, err := classify(c.Client.List(ctx, l))
	switch {
	case v == failed:
		r.add("v1alpha1/"+kind, CheckUnknown, "cannot list v1alpha1 %ss: %v", kind, err)
	case v == forbidden:
		r.add("v1alpha1/"+kind, CheckUnknown, "cannot list v1alpha1 %ss (Forbidden)", kind)
	case len(l.Items) > 0:
		r.add("v1alpha1/"+kind, CheckWarning, "%d v1alpha1 %s(s) left to migrate (cosi-migrate, "+
			"docs/v1alpha1-drivers.md)", len(l.Items), kind)
	}
	return nil
}

// checkAdmission: every admission policy installed and bound.
func (c *Command) checkAdmission(ctx context.Context, r *DoctorReport) error {
	var bindings admissionv1.ValidatingAdmissionPolicyBindingList
	v, err := classify(c.Client.List(ctx, &bindings))
	if v == failed {
		return err
	}
	if v == forbidden {
		r.add("admission", CheckUnknown, "cannot list ValidatingAdmissionPolicyBindings (Forbidden)")
		return nil
	}
	for _, name := range AdmissionPolicies {
		state, err := c.admissionPolicy(ctx, name, bindings.Items)
		if err != nil {
			return err
		}
		switch state {
		case policyForbidden:
			r.add("admission/"+name, CheckUnknown, "cannot read ValidatingAdmissionPolicy %s (Forbidden)", name)
		case policyMissing:
			r.add("admission/"+name, CheckFailed, "ValidatingAdmissionPolicy %s is not installed (config/admission): "+
				"tenants can write what COSI reserves", name)
		case policyUnbound:
			r.add("admission/"+name, CheckFailed, "ValidatingAdmissionPolicy %s is installed but not bound", name)
		case policyNotDenying:
			r.add("admission/"+name, CheckFailed, "ValidatingAdmissionPolicy %s is bound without validationActions "+
				"Deny: it refuses nothing, tenants can write what COSI reserves", name)
		default:
			r.add("admission/"+name, CheckOK, "ValidatingAdmissionPolicy %s is installed and bound", name)
		}
	}
	return nil
}

// policyState is what doctor found of an admission policy.
type policyState string

const (
	policyDenies     policyState = "installed and bound"
	policyMissing    policyState = "not installed"
	policyForbidden  policyState = "forbidden"
	policyUnbound    policyState = "not bound"
	policyNotDenying policyState = "bound without Deny"
)

// admissionPolicy tells whether the policy name is installed and bound, by one of bindings, with
// validationActions Deny: a binding that only warns or audits refuses nothing. err is returned
// only when the policy could not be read.
func (c *Command) admissionPolicy(
	ctx context.Context,
	name string,
	bindings []admissionv1.ValidatingAdmissionPolicyBinding,
) (policyState, error) {
	v, err := c.read(ctx, types.NamespacedName{Name: name}, &admissionv1.ValidatingAdmissionPolicy{})
	switch v {
	case failed:
		return "", err
	case forbidden:
		return policyForbidden, nil
	case notFound:
		return policyMissing, nil
	}
	bound := slices.ContainsFunc(bindings, func(b admissionv1.ValidatingAdmissionPolicyBinding) bool {
		return b.Spec.PolicyName == name
	})
	denies := slices.ContainsFunc(bindings, func(b admissionv1.ValidatingAdmissionPolicyBinding) bool {
		return b.Spec.PolicyName == name && slices.Contains(b.Spec.ValidationActions, admissionv1.Deny)
	})
	switch {
	case !bound:
		return policyUnbound, nil
	case !denies:
		return policyNotDenying, nil
	}
	return policyDenies, nil
}

// checkComponents: the controller and one sidecar per driver name in use hold their Leases;
// classes naming a driver that no sidecar serves.
func (c *Command) checkComponents(ctx context.Context, r *DoctorReport) error {
	if err := c.checkLease(ctx, r, "controller", controller.LeaseName, "the COSI controller"); err != nil {
		return err
	}
	drivers := map[string][]string{} // driver name → who names it
	var classes cosiapi.BucketClassList
	v, err := classify(c.Client.List(ctx, &classes))
	if v == failed {
		return err
	}
	if v == forbidden {
		r.add("drivers", CheckUnknown, "cannot list BucketClasses (Forbidden): the drivers in use are unknown")
		return nil
	}
	for _, cl := range classes.Items {
		drivers[cl.Spec.DriverName] = append(drivers[cl.Spec.DriverName], "BucketClass "+cl.Name)
	}
	var aclasses cosiapi.BucketAccessClassList
	if v, err := classify(c.Client.List(ctx, &aclasses)); v == failed {
		return err
	}
	for _, cl := range aclasses.Items {
		drivers[cl.Spec.DriverName] = append(drivers[cl.Spec.DriverName], "BucketAccessClass "+cl.Name)
	}
	var bl cosiapi.BucketList
	if v, err := classify(c.Client.List(ctx, &bl)); v == failed {
		return err
	}
	for _, b := range bl.Items {
		if _, ok := drivers[b.Spec.DriverName]; !ok {
			drivers[b.Spec.DriverName] = append(drivers[b.Spec.DriverName], "Bucket "+b.Name)
		}
	}
	for _, d := range slices.Sorted(maps.Keys(drivers)) {
		users := drivers[d]
		if len(users) > 3 {
			users = append(users[:3:3], fmt.Sprintf("%d more", len(drivers[d])-3))
		}
		if err := c.checkLease(ctx, r, "sidecar/"+d, sidecar.LeaseName(d),
			fmt.Sprintf("a sidecar of driver %s (named by %s)", d, strings.Join(users, ", "))); err != nil {
			return err
		}
	}
	return nil
}

// checkLease: the Lease name is held and renewed: in the COSI namespace, or in any namespace when
// it is not there (sidecars elect in their own Pod's namespace).
func (c *Command) checkLease(ctx context.Context, r *DoctorReport, check, name, what string) error {
	l := &coordinationv1.Lease{}
	v, err := c.read(ctx, types.NamespacedName{Namespace: c.COSINamespace, Name: name}, l)
	if err != nil {
		return err
	}
	if v == notFound {
		var list coordinationv1.LeaseList
		lv, err := classify(c.Client.List(ctx, &list, client.MatchingFields{"metadata.name": name}))
		switch {
		case lv == failed:
			return err
		case lv == visible && len(list.Items) > 0:
			l, v = &list.Items[0], visible
		}
	}
	switch v {
	case forbidden:
		r.add(check, CheckUnknown, "cannot read Lease %s/%s (Forbidden): is %s running?", c.COSINamespace, name, what)
		return nil
	case notFound:
		r.add(check, CheckFailed, "no Lease %s in %s or any namespace: %s is not running (or runs without "+
			"--leader-elect)", name, c.COSINamespace, what)
		return nil
	}
	ns := l.Namespace
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	var expires time.Time
	if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		expires = l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	}
	switch {
	case holder == "":
		r.add(check, CheckFailed, "Lease %s/%s is released: %s is not running", ns, name, what)
	case l.Spec.RenewTime != nil && l.Spec.RenewTime.After(c.Now().Add(maxClockSkew)):
		// Renewed "in the future": its expiry says nothing about whether the holder still renews it.
		r.add(check, CheckWarning, "Lease %s/%s of %s was renewed at %s, %s ahead of this machine's clock: one "+
			"of the two clocks is wrong, and whether %s runs cannot be told", ns, name, holder,
			l.Spec.RenewTime.Local().Format(time.RFC3339), l.Spec.RenewTime.Sub(c.Now()).Round(time.Second), what)
	case c.Now().After(expires):
		r.add(check, CheckFailed, "Lease %s/%s of %s expired at %s: %s stopped renewing it", ns, name,
			holder, expires.Local().Format(time.RFC3339), what)
	case ns != c.COSINamespace:
		// Anyone who may create Leases in a namespace could have written it; the controller reads
		// it only where an admin said a driver is installed.
		r.add(check, CheckWarning, "%s holds Lease %s/%s, outside COSI's namespace: %s runs there if that is the "+
			"driver's namespace (then the controller needs --sidecar-lease-namespaces=%s to see it)", holder, ns, name,
			what, ns)
	default:
		r.add(check, CheckOK, "%s runs: %s holds Lease %s/%s", what, holder, ns, name)
	}
	return nil
}

// maxClockSkew is how far ahead of this machine's clock a Lease's renewTime may be before doctor
// stops trusting its expiry.
const maxClockSkew = time.Minute

// checkStuck: COSI objects, and access Secrets, Terminating for longer than StuckAfter, and the
// finalizers that hold them.
func (c *Command) checkStuck(ctx context.Context, r *DoctorReport) error {
	var stuck []string
	lists := []struct {
		kind string
		list client.ObjectList
	}{
		{"BucketClaim", &cosiapi.BucketClaimList{}},
		{"BucketAccess", &cosiapi.BucketAccessList{}},
		{"Bucket", &cosiapi.BucketList{}},
	}
	for _, l := range lists {
		objs, err := c.listWide(ctx, r, l.kind, l.list)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if s := c.stuck(l.kind, o); s != "" {
				stuck = append(stuck, s)
			}
		}
	}
	secrets, _, err := c.accessSecrets(ctx, r)
	if err != nil {
		return err
	}
	for i := range secrets {
		if s := c.stuck("Secret", &secrets[i]); s != "" {
			stuck = append(stuck, s)
		}
	}
	if len(stuck) == 0 {
		r.add("stuck", CheckOK, "no object has been Terminating for longer than %s", c.StuckAfter)
		return nil
	}
	for _, s := range stuck {
		r.add("stuck", CheckFailed, "%s", s)
	}
	return nil
}

func (c *Command) stuck(kind string, o client.Object) string {
	dt := o.GetDeletionTimestamp()
	after := c.StuckAfter
	if kind == "Secret" && slices.Equal(o.GetFinalizers(), []string{cosiapi.FinalizerProtection}) {
		// A deleted access Secret waits for the sidecar's next check (checkSecrets says until when).
		after += c.checkInterval(o.GetAnnotations())
	}
	if dt == nil || c.Now().Sub(dt.Time) < after {
		return ""
	}
	name := o.GetName()
	if o.GetNamespace() != "" {
		name = o.GetNamespace() + "/" + name
	}
	var who []string
	for _, f := range o.GetFinalizers() {
		who = append(who, f+" ("+finalizerHolder(kind, f)+")")
	}
	return fmt.Sprintf("%s %s has been Terminating for %s, held by %s", kind, name,
		c.Now().Sub(dt.Time).Round(time.Second), strings.Join(who, ", "))
}

// finalizerHolder says which component removes a finalizer of COSI's on a kind.
func finalizerHolder(kind, f string) string {
	if f != cosiapi.FinalizerProtection {
		return "not COSI's"
	}
	switch kind {
	case "BucketClaim":
		return "the controller, once the Bucket is handled; kubectl cosi status claim says what it waits for"
	case "BucketAccess":
		return "the controller, once the sidecar revoked the access"
	case "Bucket":
		return "the driver's sidecar, once the driver deleted the bucket"
	}
	return "the driver's sidecar, at its next Secret check"
}

// listWide lists kind in every namespace, or in the current one when the user may not list them
// all (noted in the report).
func (c *Command) listWide(ctx context.Context, r *DoctorReport, kind string, list client.ObjectList) (
	[]client.Object, error,
) {
	v, err := classify(c.Client.List(ctx, list))
	if v == forbidden && kind != "Bucket" {
		r.add("visibility/"+kind, CheckUnknown, "cannot list %ss in every namespace (Forbidden); looking in "+
			"namespace %s only", kind, c.Namespace)
		v, err = classify(c.Client.List(ctx, list, client.InNamespace(c.Namespace)))
	}
	switch v {
	case failed:
		return nil, err
	case forbidden:
		r.add("visibility/"+kind, CheckUnknown, "cannot list %ss (Forbidden)", kind)
		return nil, nil
	}
	var objs []client.Object
	switch l := list.(type) {
	case *cosiapi.BucketClaimList:
		for i := range l.Items {
			objs = append(objs, &l.Items[i])
		}
	case *cosiapi.BucketAccessList:
		for i := range l.Items {
			objs = append(objs, &l.Items[i])
		}
	case *cosiapi.BucketList:
		for i := range l.Items {
			objs = append(objs, &l.Items[i])
		}
	}
	return objs, nil
}

// accessSecrets lists the metadata of the Secrets COSI wrote (their label), in every namespace
// or the current one; ok is false when the user may list them in neither (an empty list is ok).
func (c *Command) accessSecrets(ctx context.Context, r *DoctorReport) (
	secrets []metav1.PartialObjectMetadata, ok bool, err error,
) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	opts := []client.ListOption{client.HasLabels{cosiapi.LabelBucketAccessUID}}
	v, err := classify(c.Client.List(ctx, list, opts...))
	if v == forbidden {
		v, err = classify(c.Client.List(ctx, list, append(opts, client.InNamespace(c.Namespace))...))
	}
	switch v {
	case failed:
		return nil, false, err
	case forbidden:
		r.add("visibility/Secret", CheckUnknown, "cannot list Secrets (Forbidden)")
		return nil, false, nil
	}
	return list.Items, true, nil
}

// checkSecrets: provisioned accesses whose Secret is missing or being deleted.
func (c *Command) checkSecrets(ctx context.Context, r *DoctorReport) error {
	var accesses cosiapi.BucketAccessList
	v, err := classify(c.Client.List(ctx, &accesses))
	if v == forbidden {
		v, err = classify(c.Client.List(ctx, &accesses, client.InNamespace(c.Namespace)))
	}
	if v == failed {
		return err
	}
	if v == forbidden {
		return nil // reported by checkStuck
	}
	secrets, ok, err := c.accessSecrets(ctx, &DoctorReport{})
	if err != nil {
		return err
	}
	if !ok {
		r.add("secrets", CheckUnknown, "cannot list Secrets (Forbidden): missing access Secrets are not checked")
		return nil
	}
	byName := map[string]*metav1.PartialObjectMetadata{}
	for i := range secrets {
		byName[secrets[i].Namespace+"/"+secrets[i].Name] = &secrets[i]
	}
	var problems []string
	for _, ba := range accesses.Items {
		p := findCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned)
		if ba.DeletionTimestamp != nil || p == nil || p.Status != metav1.ConditionTrue {
			continue
		}
		for _, claim := range ba.Spec.BucketClaims {
			key := ba.Namespace + "/" + claim.AccessSecretName
			s := byName[key]
			switch {
			case s == nil || s.Labels[cosiapi.LabelBucketAccessUID] != string(ba.UID):
				problems = append(problems, fmt.Sprintf("Secret %s of BucketAccess %s is missing; the sidecar "+
					"writes it again at its next check (at the latest at %s)", key, ba.Name,
					clock(checkDeadline(c.Now(), c.SecretCheckInterval), c.Now())))
			case s.DeletionTimestamp != nil:
				now := c.Now()
				at := checkDeadline(s.DeletionTimestamp.Time, c.checkInterval(s.Annotations))
				next := "writes it again at its next check (at the latest at " + clock(at, now) + ")"
				if at.Before(now) {
					next = "should have written it again at its check by " + clock(at, now) + " and did not: is the " +
						"sidecar of driver " + ba.Status.DriverName + " running?"
				}
				problems = append(problems, fmt.Sprintf("Secret %s of BucketAccess %s was deleted at %s; the sidecar %s",
					key, ba.Name, clock(s.DeletionTimestamp.Time, now), next))
			}
		}
	}
	if len(problems) == 0 {
		r.add("secrets", CheckOK, "every provisioned BucketAccess has its Secrets")
	}
	for _, p := range problems {
		r.add("secrets", CheckWarning, "%s", p)
	}
	return nil
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}
