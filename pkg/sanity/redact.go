package sanity

import (
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Redacted stands in the suite's output for a secret the driver returned: a value of a
// cosi_secret field (S3 secret keys, Azure SAS tokens, GCS private keys and HMAC secrets) or of a
// v1alpha1 credentials' secrets map (except the keys v1alpha1.NonSecretKeys lists).
//
// Every message of a Result goes through one redactor before Run returns it or Test reports it,
// whatever put the text there: the driver's error messages, the IDs and bucket info it returned,
// the probe's errors, a vendor's case. So a secret does not reach the suite's output (the lines
// cosi-sanity prints, its --junit XML, a go test log) wherever the driver hid it. The rule:
//   - every secret of at least minSecretLen characters is replaced wherever it occurs, also
//     inside a longer string (an ID, an endpoint, an error message), and so are the forms in which
//     Go programs quote it (%q, JSON, URL escaping);
//   - so is every run of fragmentLen or more characters that is part of a secret (a key cut short,
//     or escaped in a way the forms above miss), unless the run is part of a string used in the
//     open: a name the suite chose, or a value the driver returned in a field that is not secret
//     and holds no secret. A SAS token embeds its container's URI, for instance: without the
//     exception every bucket name of an Azure driver would be blanked from its messages.
//
// Run redacts with every secret of the run, so a value the driver returned as a secret only later
// in the run is redacted from the earlier cases' messages too; Test reports each case as it ends,
// so there a secret is redacted from the case it was returned in onwards.
const Redacted = "***redacted***"

const (
	// minSecretLen: shorter values (a flag such as "1" or "true" in a v1alpha1 secrets map) cannot
	// be told from ordinary text, and are no credential.
	minSecretLen = 4
	// fragmentLen: shorter runs leave at least 28 characters of a 40-character S3 secret key
	// unknown (168 bits), and runs of 8 would blank the structure every token shares ("https://",
	// "-----BEGIN"), whoever's token it is.
	fragmentLen = 12
)

// redactor knows every secret the driver has returned so far, and the strings used in the open.
type redactor struct {
	mu        sync.Mutex
	secrets   map[string]bool
	needles   []string        // the secrets and their quoted forms
	fragments map[string]bool // every fragmentLen-long run of a secret
	open      map[string]bool // strings used in the open, none holding a secret
}

func newRedactor() *redactor {
	return &redactor{secrets: map[string]bool{}, fragments: map[string]bool{}, open: map[string]bool{}}
}

// addSecret makes v a secret: redacted from then on, and no longer part of an open string.
func (r *redactor) addSecret(v string) {
	if len(v) < minSecretLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.secrets[v] {
		return
	}
	r.secrets[v] = true
	for _, form := range quotedForms(v) {
		if !slices.Contains(r.needles, form) {
			r.needles = append(r.needles, form)
		}
	}
	for i := 0; i+fragmentLen <= len(v); i++ {
		r.fragments[v[i:i+fragmentLen]] = true
	}
	for s := range r.open {
		if strings.Contains(s, v) {
			delete(r.open, s)
		}
	}
}

// addOpen records a string used in the open (a name the suite chose, a value of a field that is
// not secret), unless it holds a secret known so far; addSecret drops it when it holds a later one.
func (r *redactor) addOpen(s string) {
	if len(s) < fragmentLen {
		return // no fragment fits in it
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for secret := range r.secrets {
		if strings.Contains(s, secret) {
			return
		}
	}
	r.open[s] = true
}

// quotedForms are v and the forms in which Go programs commonly print it.
func quotedForms(v string) []string {
	forms := []string{v, strings.Trim(strconv.Quote(v), `"`), url.QueryEscape(v), url.PathEscape(v)}
	if j, err := json.Marshal(v); err == nil {
		forms = append(forms, strings.Trim(string(j), `"`))
	}
	slices.Sort(forms)
	return slices.Compact(forms)
}

// redact returns s with every secret, and every fragment of one that is not part of an open
// string, replaced by Redacted.
func (r *redactor) redact(s string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	hidden := make([]bool, len(s))
	mark := func(from, to int) {
		for i := from; i < to; i++ {
			hidden[i] = true
		}
	}
	for _, n := range r.needles {
		for from := 0; ; {
			i := strings.Index(s[from:], n)
			if i < 0 {
				break
			}
			mark(from+i, from+i+len(n))
			from += i + 1
		}
	}
	openFragment := map[string]bool{}
	for i := 0; i+fragmentLen <= len(s); i++ {
		f := s[i : i+fragmentLen]
		if !r.fragments[f] {
			continue
		}
		isOpen, seen := openFragment[f]
		if !seen {
			for o := range r.open {
				if strings.Contains(o, f) {
					isOpen = true
					break
				}
			}
			openFragment[f] = isOpen
		}
		if !isOpen {
			mark(i, i+fragmentLen)
		}
	}
	if !slices.Contains(hidden, true) {
		return s
	}
	// Whole characters: a fragment's edge may fall inside one.
	for i := range hidden {
		if hidden[i] && i > 0 && !utf8.RuneStart(s[i]) && !hidden[i-1] {
			for j := i - 1; j >= 0 && !hidden[j]; j-- {
				hidden[j] = true
				if utf8.RuneStart(s[j]) {
					break
				}
			}
		}
		if hidden[i] && i+1 < len(s) && !utf8.RuneStart(s[i+1]) {
			hidden[i+1] = true
		}
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if !hidden[i] {
			b.WriteByte(s[i])
			continue
		}
		b.WriteString(Redacted)
		for i+1 < len(s) && hidden[i+1] {
			i++
		}
	}
	return b.String()
}

// v1alpha1CredentialSecrets is the v1alpha1 field that carries a grant's keys: a map, each value
// secret unless v1alpha1.NonSecretKeys lists its key.
const v1alpha1CredentialSecrets protoreflect.FullName = "cosi.v1alpha1.CredentialDetails.secrets"

// replyStrings sorts the strings of a driver's reply into secrets and strings used in the open.
func replyStrings(m protoreflect.Message) (secrets, open []string) {
	add := func(secret bool, v string) {
		switch {
		case v == "":
		case secret:
			secrets = append(secrets, v)
		default:
			open = append(open, v)
		}
	}
	var walk func(m protoreflect.Message, protocolKey string)
	walk = func(m protoreflect.Message, protocolKey string) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			secret, _ := proto.GetExtension(fd.Options(), cosiproto.E_CosiSecret).(bool)
			switch {
			case fd.FullName() == v1alpha1CredentialSecrets:
				v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
					add(!slices.Contains(v1alpha1.NonSecretKeys()[protocolKey], k.String()), v.String())
					return true
				})
			case fd.IsMap():
				v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
					switch {
					case fd.MapValue().Message() != nil:
						walk(v.Message(), k.String()) // v1alpha1's credentials, keyed by protocol
					case fd.MapValue().Kind() == protoreflect.StringKind:
						add(secret, v.String())
					}
					return true
				})
			case fd.IsList():
				for i := range v.List().Len() {
					if fd.Message() != nil {
						walk(v.List().Get(i).Message(), "")
					} else if fd.Kind() == protoreflect.StringKind {
						add(secret, v.List().Get(i).String())
					}
				}
			case fd.Message() != nil:
				walk(v.Message(), "")
			case fd.Kind() == protoreflect.StringKind:
				add(secret, v.String())
			}
			return true
		})
	}
	walk(m, "")
	return secrets, open
}
