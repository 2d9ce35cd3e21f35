package memory

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// state is everything the "backend" holds. It is what the state file stores.
type state struct {
	Buckets  map[string]*bucket  `json:"buckets"`
	Accounts map[string]*account `json:"accounts"`
}

func newState() state {
	return state{Buckets: map[string]*bucket{}, Accounts: map[string]*account{}}
}

type bucket struct {
	Protocols  []cosiproto.ObjectProtocol_Type `json:"protocols"`
	Parameters map[string]string               `json:"parameters,omitempty"`
	// Objects are the names of the objects written into the bucket (Backend.Put): the driver
	// stores no data, only enough for a test to see a bucket that holds objects. Deleting the
	// bucket deletes them with it.
	Objects []string `json:"objects,omitempty"`
}

func (b *bucket) equal(o *bucket) bool {
	return slices.Equal(b.Protocols, o.Protocols) && maps.Equal(b.Parameters, o.Parameters)
}

type modes struct {
	ObjectData     cosiproto.AccessMode_Mode `json:"objectData"`
	ObjectMetadata cosiproto.AccessMode_Mode `json:"objectMetadata"`
	BucketMetadata cosiproto.AccessMode_Mode `json:"bucketMetadata"`
}

type account struct {
	Buckets            map[string]modes                  `json:"buckets"`
	Protocol           cosiproto.ObjectProtocol_Type     `json:"protocol"`
	AuthenticationType cosiproto.AuthenticationType_Type `json:"authenticationType"`
	ServiceAccount     string                            `json:"serviceAccount,omitempty"`
	Parameters         map[string]string                 `json:"parameters,omitempty"`
	// Secret is the account's key material. The state file holds it, like a backend's user
	// database would: protect the file accordingly (it is written with mode 0600).
	Secret string `json:"secret"`
	// KeyID is the access key ID of Secret; empty for the key an account was granted with (its ID
	// is derived from the account ID, as before rotation existed).
	KeyID string `json:"keyID,omitempty"`
	// Previous is the key before the newest, still valid (Config.NewKeyPerGrant).
	Previous string    `json:"previous,omitempty"`
	Created  time.Time `json:"created"`
	// Renewed is when the account's current key was issued, when a rotation or a grant issued
	// it after Created: an Azure token expires ParamSASExpiry after it was issued, as the Azure
	// driver's stored access policies do, and is never extended.
	Renewed time.Time `json:"renewed,omitzero"`
	// Older are keys that a rotation replaced as the account's current key and that are not
	// retired yet: they keep working.
	Older []key `json:"older,omitempty"`
	// Rotations maps the credential_id a rotation started from to the credential_id it issued, so
	// that a repeated DriverRotateBucketAccessCredentials returns the same key.
	Rotations map[string]string `json:"rotations,omitempty"`
}

// key is one key of an account.
type key struct {
	ID     string `json:"id,omitempty"`
	Secret string `json:"secret"`
	// Issued is when the key was issued: its Azure token expires ParamSASExpiry later.
	Issued time.Time `json:"issued,omitzero"`
}

// sameGrant reports whether two accounts grant the same access (ignoring the key).
func (a *account) sameGrant(o *account) bool {
	return maps.Equal(a.Buckets, o.Buckets) && a.Protocol == o.Protocol &&
		a.AuthenticationType == o.AuthenticationType && a.ServiceAccount == o.ServiceAccount &&
		maps.Equal(a.Parameters, o.Parameters)
}

// load reads the state file, if configured and present.
func (d *Driver) load() error {
	if d.cfg.StateFile == "" {
		return nil
	}
	data, err := os.ReadFile(d.cfg.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading state file: %w", err)
	}
	st := newState()
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("parsing state file %s: %w", d.cfg.StateFile, err)
	}
	d.state = st
	return nil
}

// save writes the state file, if configured, atomically: a crash leaves the old or the new state,
// never half of one. Callers hold d.mu and undo their change when save fails, so the driver never
// reports a success it would forget after a restart.
func (d *Driver) save() error {
	if d.cfg.StateFile == "" {
		return nil
	}
	data, err := json.Marshal(d.state)
	if err != nil {
		return status.Errorf(codes.Internal, "encoding state: %v", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(d.cfg.StateFile), ".memory-state-*")
	if err != nil {
		return status.Errorf(codes.Unavailable, "saving state: %v", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), d.cfg.StateFile)
	}
	if err != nil {
		return status.Errorf(codes.Unavailable, "saving state: %v", err)
	}
	return nil
}
