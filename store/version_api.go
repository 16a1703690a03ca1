package store

// What the store's face asks of the version list beyond its listing. Its fields are its own
// (version_list.go).

// lockRefresh lets one Refresh run at a time (each publishes the list it scanned); it returns
// the unlock.
func (vl *versionList) lockRefresh() (unlock func()) {
	vl.refreshMu.Lock()
	return vl.refreshMu.Unlock
}
