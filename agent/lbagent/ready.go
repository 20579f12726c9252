package lbagent

// ready reports whether the instance is registered in etcd under a live
// lease and, when not, why: etcd's last error while the agent cannot use
// it, or that the first probe and write are still to come.
func (a *Agent) ready() (bool, string) {
	reg := a.reg.Load()
	if reg != nil {
		if _, ok := reg.Written(); ok && reg.Lease() != 0 {
			return true, ""
		}
	}
	if e := a.etcd.Load(); e != nil && !e.Connected() {
		if st := e.State(); st.LastError != "" {
			return false, "not registered: waiting for etcd: " + st.LastError
		}
		return false, "not registered: waiting for etcd"
	}
	if _, ok := a.Current(); !ok {
		return false, "not registered: waiting for the first probe"
	}
	return false, "not registered yet"
}
