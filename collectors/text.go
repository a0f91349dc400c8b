package collectors

import "github.com/leasewatch/leasewatch/audit"

// AsText applies audit.Text to every string of ob that came from its
// backend: the lock's name, the holder, the position and the detail's
// strings. A collector calls it once, where it makes the observation from
// what it read, and keeps the raw bytes for its own lookups in the backend.
func AsText(ob *audit.Observation) {
	ob.Lock.Name = audit.Text(ob.Lock.Name)
	ob.Holder = audit.Text(ob.Holder)
	ob.Position = audit.Text(ob.Position)
	for k, v := range ob.Detail {
		switch v := v.(type) {
		case string:
			ob.Detail[k] = audit.Text(v)
		case []string:
			for i := range v {
				v[i] = audit.Text(v[i])
			}
		}
	}
}
