package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"
)

// tree is one complete read of every configured path: the lock
// directories found (a configured path itself, when it has contenders or no
// other children, and the configured paths' child directories) and the
// highest zxid the read showed.
type tree struct {
	dirs map[string]*dir     // full path -> its read; nil: the path does not exist
	subs map[string][]string // configured full path -> its child directories' full paths
	zxid int64
	// owned is every session's nodes, by their czxids: made by ownedBy when
	// first asked for after settle, which only ends need.
	owned map[int64][]int64
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
	t.zxid, t.owned = 0, nil
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

// ownedBy returns the czxids of the nodes session owns in t.
func (t *tree) ownedBy(session int64) []int64 {
	if t.owned == nil {
		t.owned = make(map[int64][]int64)
		for _, d := range t.dirs {
			if d == nil {
				continue
			}
			for _, n := range d.nodes {
				if n.owner != 0 {
					t.owned[n.owner] = append(t.owned[n.owner], n.czxid)
				}
			}
		}
	}
	return t.owned[session]
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
	var unread []string
	for _, name := range others {
		sub := join(root, name)
		t.subs[root] = append(t.subs[root], sub)
		// A directory read before whose watch has not fired is unchanged:
		// reading it again would only stack another watch on it.
		if sd, ok := known[sub]; ok && sd != nil && r.watching(sub) {
			t.dirs[sub] = sd
			continue
		}
		unread = append(unread, sub)
	}
	return r.readDirs(ctx, t, unread)
}

// concurrentReads bounds the reads a run has in flight at once. A read
// waits a round trip to the server, and a busy source has hundreds of
// directories changing a second: read one after another, they fall behind
// (go-zookeeper pipelines concurrent requests on the one connection).
const concurrentReads = 32

// readDirs reads the lock directories paths into t, concurrently.
func (r *run) readDirs(ctx context.Context, t *tree, paths []string) error {
	read := make([]*dir, len(paths))
	err := r.each(ctx, len(paths), func(i int) (err error) {
		if read[i], _, err = r.readDir(ctx, paths[i]); err != nil {
			return fmt.Errorf("read %s: %w", paths[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, p := range paths {
		t.dirs[p] = read[i]
	}
	return nil
}

// each calls fn(0) to fn(n-1), at most concurrentReads at once, and returns
// the first error.
func (r *run) each(ctx context.Context, n int, fn func(i int) error) error {
	g, failed := errgroup.WithContext(ctx) // done when one fails, and by Wait's return
	g.SetLimit(concurrentReads)
	for i := range n {
		if failed.Err() != nil {
			break
		}
		g.Go(func() error { return fn(i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
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
	d = &dir{path: r.lockName(p), pzxid: st.Pzxid, creates: createsOf(st.Cversion, st.NumChildren), readZxid: max(st.Pzxid, st.Czxid), created: st.Czxid}
	var contenders []string
	for _, name := range names {
		if seq, ok := parseSeq(name); ok {
			contenders = append(contenders, name)
			d.nodes = append(d.nodes, node{name: name, seq: seq, reader: isReader(name)})
		} else {
			others = append(others, name)
		}
	}
	// The contenders' reads go together: one round trip, not one each.
	gone := make([]bool, len(contenders))
	err = r.each(ctx, len(contenders), func(i int) error {
		data, ns, err := z.Get(join(p, contenders[i]))
		switch {
		case errors.Is(err, zk.ErrNoNode):
			gone[i] = true
		case err != nil:
			return err
		default:
			n := &d.nodes[i]
			n.czxid, n.owner, n.data = ns.Czxid, ns.EphemeralOwner, string(data)
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, err
	}
	for i := len(gone) - 1; i >= 0; i-- {
		if gone[i] {
			stale = true
			d.nodes = slices.Delete(d.nodes, i, i+1)
		}
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
