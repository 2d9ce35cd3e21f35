package azure

// PolicyOwner is policyOwner, for the tests: the account a stored access policy belongs to.
var PolicyOwner = policyOwner

// AccessSlots is accessSlots, for the tests.
const AccessSlots = accessSlots
