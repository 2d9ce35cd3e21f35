package s3

import "context"

// RGWKeyIDs returns the access key IDs of RGW user id, for tests that count keys.
func RGWKeyIDs(ctx context.Context, a *RGWAccounts, id string) ([]string, error) {
	u, err := a.getUser(ctx, id)
	if err != nil || u == nil {
		return nil, err
	}
	var ids []string
	for _, k := range u.Keys {
		ids = append(ids, k.AccessKey)
	}
	return ids, nil
}
