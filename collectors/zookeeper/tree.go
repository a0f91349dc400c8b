package zookeeper

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"
)

// tree is one complete read of every configured path: the lock
// directories found (a configured path itself, when it has contenders or no
// other children, and the configured paths' child directories) and the
// highest zxid the read showed.
type tree struct {
	dirs map[string]*dir     // full path -> its read; nil: the path does not exist
	subs map[string][]string // configured full path -> its child directories' full paths
	zxid int64
}

func newTree() *tree {
	return &tree{dirs: make(map[string]*dir), subs: make(map[string][]string)}
}

// watched returns every path the tree covers, sorted: the configured paths
// and their child directories.
func (t *tree) watched() []string {
	var out []string
	for root, subs := range t.subs {
		out = append(out, root)
		out = append(out, subs...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// settle sets t.zxid to the highest zxid its reads showed.
func (t *tree) settle() {
	t.zxid = 0
	for _, d := range t.dirs {
		if d == nil {
			continue
		}
		t.zxid = max(t.zxid, d.readZxid)
		for _, n := range d.nodes {
			t.zxid = max(t.zxid, n.czxid)
		}
	}
}

// clone returns a copy that shares the dirs, which reads replace and never
// modify.
func (t *tree) clone() *tree {
	c := newTree()
	for k, v := range t.dirs {
		c.dirs[k] = v
	}
	for k, v := range t.subs {
		c.subs[k] = v
	}
	c.zxid = t.zxid
	return c
}

// readRoot reads a configured path and every child directory of it into t,
// arming a watch on each.
func (r *run) readRoot(ctx context.Context, t *tree, root string) error {
	d, others, err := r.readDir(ctx, root)
	if err != nil {
		return err
	}
	known := make(map[string]*dir)
	for _, sub := range t.subs[root] {
		known[sub] = t.dirs[sub]
		delete(t.dirs, sub)
	}
	t.dirs[root], t.subs[root] = d, nil
	if d == nil {
		return nil
	}
	d.foreign = 0 // a configured path's other children are its lock directories
	for _, name := range others {
		sub := join(root, name)
		sd, ok := known[sub]
		// A directory read before whose watch has not fired is unchanged:
		// reading it again would only stack another watch on it.
		if !ok || sd == nil || !r.watching(sub) {
			if sd, _, err = r.readDir(ctx, sub); err != nil {
				return err
			}
		}
		t.dirs[sub] = sd
		t.subs[root] = append(t.subs[root], sub)
	}
	return nil
}

// relists bounds how often readDir lists a directory again because a
// child went between the listing and its read.
const relists = 5

// readDir lists p with a child watch and reads each contender's Stat and
// data. It returns nil for a path that does not exist (watching for its
// creation), and the children that are no recipe's contenders. A contender
// deleted between the listing and its read makes the listing stale (its
// pzxid is before the delete, and a child created meanwhile is missing), so
// the directory is listed again.
func (r *run) readDir(ctx context.Context, p string) (*dir, []string, error) {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		d, others, stale, err := r.listDir(ctx, p)
		if err != nil || !stale || attempt == relists {
			return d, others, err
		}
	}
}

// listDir is one attempt of readDir; stale says a contender went while it
// read the children.
func (r *run) listDir(ctx context.Context, p string) (d *dir, others []string, stale bool, err error) {
	z := r.conn.zk
	names, st, ch, err := z.ChildrenW(p)
	if errors.Is(err, zk.ErrNoNode) {
		ok, _, ech, err := z.ExistsW(p)
		if err != nil {
			return nil, nil, false, err
		}
		r.arm(ctx, p, ech)
		return nil, nil, ok, nil // ok: created in between
	}
	if err != nil {
		return nil, nil, false, err
	}
	r.arm(ctx, p, ch)
	d = &dir{path: r.lockName(p), pzxid: st.Pzxid, creates: createsOf(st.Cversion, st.NumChildren), readZxid: max(st.Pzxid, st.Czxid)}
	for _, name := range names {
		seq, ok := parseSeq(name)
		if !ok {
			others = append(others, name)
			continue
		}
		data, ns, err := z.Get(join(p, name))
		if errors.Is(err, zk.ErrNoNode) {
			stale = true
			continue
		}
		if err != nil {
			return nil, nil, false, err
		}
		d.nodes = append(d.nodes, node{name: name, seq: seq, czxid: ns.Czxid, owner: ns.EphemeralOwner, data: string(data)})
	}
	sortNodes(d.nodes)
	d.foreign = len(others)
	return d, others, stale, nil
}

// arm forwards the one event of a watch on p to the run's loop. A watch
// ended by the session's end (EventNotWatching) is left to the session's
// own handling, which reads everything again.
func (r *run) arm(ctx context.Context, p string, ch <-chan zk.Event) {
	r.mu.Lock()
	r.armed[p]++
	r.mu.Unlock()
	go func() {
		defer func() {
			r.mu.Lock()
			if r.armed[p]--; r.armed[p] <= 0 {
				delete(r.armed, p)
			}
			r.mu.Unlock()
		}()
		select {
		case ev, ok := <-ch:
			if !ok || ev.Type == zk.EventNotWatching {
				return
			}
			select {
			case r.wake <- p:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
}

// watching reports whether a watch on p is armed and has not fired.
func (r *run) watching(p string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.armed[p] > 0
}

// join appends a child's name to its parent's path.
func join(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// fullPath is p below the chroot: the path the servers know.
func (r *run) fullPath(p string) string {
	switch {
	case r.c.cfg.Chroot == "":
		return p
	case p == "/":
		return r.c.cfg.Chroot
	}
	return r.c.cfg.Chroot + p
}

// lockName is the name of the lock at full path p: its path as the
// chrooted clients see it.
func (r *run) lockName(p string) string {
	if r.c.cfg.Chroot == "" {
		return p
	}
	if name := strings.TrimPrefix(p, r.c.cfg.Chroot); name != "" {
		return name
	}
	return "/"
}
