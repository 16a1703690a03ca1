package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/weightfs/weightfs/store/pack"
)

// The pack layer (store format 3, docs/format.md Part I §3.5, §3.6): the store's objects go
// into packs, many objects a file, so that a version costs a few files, fsyncs and requests,
// not one per tensor. packedObjects wraps the backend at backendCaps.use and is the Backend
// every part of the store calls: objects, the collector, the checker and ingest keep calling
// PutObject, OpenObject, ListObjects, StatObject and DeleteObject, and the layer decides
// where the bytes go (pack_write.go) and finds them again (pack_read.go). Loose objects
// (objects/ab/<hex>, stores of format 1 and 2) stay readable through the wrapped backend.
//
// Where each packed object is, is a map built from the store's pack indexes (loadIndexes:
// the entry of the index of the highest sequence number wins) and from the packs this
// process wrote since. A deleted packed object is only marked dead in memory: its record
// stays in its pack until gc rewrites the pack (repack).

// Bounds of the packs the layer writes.
const (
	packSmallObject = 16 << 20 // an object file at least this long is a pack of its own
	packTarget      = 64 << 20 // the open pack is finished once its records pass this
	packFilesOpen   = 32       // packs kept open for reads
)

// packLocation is where a packed object's file is: its pack, its offset and length there,
// and the sequence number of the index that says so (0: a pack of this process not yet
// indexed).
type packLocation struct {
	Pack           ID
	Offset, Length int64
	Seq            uint64
}

// packedLoc is a location as the map keeps it: the pack by its number in packedObjects.packs
// (openPackNo: the pack being written).
type packedLoc struct {
	pack           int32
	offset, length int64
	seq            uint64
}

const openPackNo = -1

// packedObjects is the pack layer: a Backend around the store's backend (embedded: the calls
// it does not change go straight through) that keeps objects in packs.
type packedObjects struct {
	Backend
	packs   PackBackend
	records Records
	log     *slog.Logger

	// wmu serializes writes: the open pack and the packs written since the last index.
	wmu     sync.Mutex
	open    *openPack
	spare   []byte             // the write buffer of the last pack finished, for the next (openPack.buf)
	written []pack.IndexedPack // finished packs not yet in an index
	// unsealed are the names of the index records this process wrote that no manifest it
	// sealed names yet (syncIndexes; the seal hands them to the manifest).
	unsealed []string

	// mu guards the location map and what it is built from.
	mu      sync.RWMutex
	loc     map[ID]packedLoc
	packIDs []ID         // pack number -> pack id
	packNo  map[ID]int32 // pack id -> pack number
	loaded  []namedIndex // the indexes the map was built from, in loadIndexes' order
	named   map[string]bool
	dead    map[ID]bool // packed objects deleted (DeleteObject), until repack
	topSeq  uint64      // highest sequence number seen in an index name
	reloads int         // reloads done (tests)
	// fallback are the packs no intact index names, with their own tables
	// (pack_fallback.go): laid under the indexes' entries at every rebuild.
	fallback []pack.IndexedPack

	// fbMu guards what the fallback remembers: tables read, packs and indexes logged.
	fbMu       sync.Mutex
	fbTables   map[ID]fallbackTable
	fbLogged   map[ID]bool
	damagedIdx map[string]bool

	// dmgMu guards what reads found damaged (pack_copies.go): records and packs, the packs
	// whose tables were checked against their names, the fallbacks logged.
	dmgMu       sync.Mutex
	badRecs     map[recKey]error
	badPacks    map[ID]error
	packChecked map[ID]bool
	fellBack    map[recKey]bool
	anyBad      atomic.Bool // a record or pack is in badRecs or badPacks

	files *packFiles // open packs for reads
	// loose makes writes go to the wrapped backend as loose objects (Options.looseObjects, a
	// test's knob); reads still find packed objects.
	loose bool
}

var _ Backend = (*packedObjects)(nil)

// newPackedObjects wraps be (the backend the store calls) with the pack layer over packs and
// records, and loads the store's indexes.
func newPackedObjects(be Backend, packs PackBackend, records Records, log *slog.Logger) (*packedObjects, error) {
	p := &packedObjects{Backend: be, packs: packs, records: records, log: log,
		loc: map[ID]packedLoc{}, packNo: map[ID]int32{}, named: map[string]bool{}, dead: map[ID]bool{},
		fbTables: map[ID]fallbackTable{}, fbLogged: map[ID]bool{}, damagedIdx: map[string]bool{},
		badRecs: map[recKey]error{}, badPacks: map[ID]error{}, packChecked: map[ID]bool{}, fellBack: map[recKey]bool{}}
	p.files = newPackFiles(packs, packFilesOpen)
	p.files.onDamage = p.noteDamaged
	good, bad, err := loadIndexes(records)
	if err != nil {
		return nil, fmt.Errorf("load pack indexes: %w", err)
	}
	p.noteDamagedIndexes(bad)
	p.fallback = p.uncoveredPacks(good)
	p.rebuildLocked(good)
	for _, d := range bad {
		p.noteSeqLocked(d.Name)
	}
	return p, nil
}

// reload re-reads the list of the store's indexes (another process sealed, or gc
// consolidated) and rebuilds the location map from them; the packs this process wrote and has
// not indexed yet stay in it. Indexes are immutable: one already loaded is not read again.
func (p *packedObjects) reload() error {
	names, err := p.records.ListRecords(RecordIndex)
	if errors.Is(err, errors.ErrUnsupported) {
		names, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("load pack indexes: %w", err)
	}
	slices.SortFunc(names, compareIndexNames)
	p.mu.RLock()
	have := make(map[string]namedIndex, len(p.loaded))
	for _, x := range p.loaded {
		have[x.Name] = x
	}
	p.mu.RUnlock()
	var good []namedIndex
	var bad []damagedIndex
	for _, name := range names {
		if _, ok := pack.ParseName(name); !ok {
			continue
		}
		if x, ok := have[name]; ok {
			good = append(good, x)
			continue
		}
		x, err := loadIndex(p.records, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupportedVersion):
			bad = append(bad, damagedIndex{Name: name, Err: err})
		case err != nil:
			return fmt.Errorf("load pack indexes: %w", err)
		default:
			good = append(good, x)
		}
	}
	p.noteDamagedIndexes(bad)
	fallback := p.uncoveredPacks(good)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reloads++
	p.fallback = fallback
	p.rebuildLocked(good)
	for _, d := range bad {
		p.noteSeqLocked(d.Name)
	}
	return nil
}

// rebuildLocked makes the map anew: the packs no intact index names (p.fallback, their own
// tables: the lowest precedence), then indexes (in loadIndexes' order), then the packs of
// this process not yet indexed (and the open pack's records). p.mu is held.
func (p *packedObjects) rebuildLocked(indexes []namedIndex) {
	p.loc = map[ID]packedLoc{}
	p.packIDs = p.packIDs[:0]
	p.packNo = map[ID]int32{}
	p.named = map[string]bool{}
	p.loaded = indexes
	for _, ip := range p.fallback {
		p.addPackLocked(ip, 0)
	}
	for _, x := range indexes {
		p.addIndexLocked(x)
	}
	p.overlayOwnLocked()
}

// overlayOwnLocked lays the packs this process wrote and has not indexed over the map. p.mu
// is held; the write state is read under wmu by the caller or not at all: written and open
// are only changed with both locks held.
func (p *packedObjects) overlayOwnLocked() {
	for _, w := range p.written {
		p.addPackLocked(w, 0)
	}
	if p.open != nil {
		for _, e := range p.open.entries() {
			p.loc[e.ID] = packedLoc{pack: openPackNo, offset: e.Offset, length: e.Length}
		}
	}
}

// addIndexLocked lays index x over the map. p.mu is held.
func (p *packedObjects) addIndexLocked(x namedIndex) {
	p.named[x.Name] = true
	p.noteSeqLocked(x.Name)
	for _, ip := range x.Packs {
		p.addPackLocked(ip, x.Seq)
	}
}

// addPackLocked lays the entries of one pack over the map, replacing what it held of their
// ids: callers lay packs in the order of their indexes' sequence numbers, this process's own
// last. (Any record of an id holds the same content; the order matters where gc re-anchored
// an object or rewrote its pack.) p.mu is held.
func (p *packedObjects) addPackLocked(ip pack.IndexedPack, seq uint64) {
	n, ok := p.packNo[ip.ID]
	if !ok {
		n = int32(len(p.packIDs))
		p.packIDs = append(p.packIDs, ip.ID)
		p.packNo[ip.ID] = n
	}
	for _, e := range ip.Entries {
		p.loc[e.ID] = packedLoc{pack: n, offset: e.Offset, length: e.Length, seq: seq}
	}
}

func (p *packedObjects) noteSeqLocked(name string) {
	if s, ok := pack.ParseName(name); ok && s > p.topSeq {
		p.topSeq = s
	}
}

// nextSeq takes the next sequence number for an index: one above every one seen.
func (p *packedObjects) nextSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.topSeq++
	return p.topSeq
}

// locate says where packed object id is; ok is false for an object not in a pack (or dead,
// or still in the pack being written).
func (p *packedObjects) locate(id ID) (packLocation, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	l, ok := p.loc[id]
	if !ok || l.pack == openPackNo || p.dead[id] {
		return packLocation{}, false
	}
	return packLocation{Pack: p.packIDs[l.pack], Offset: l.offset, Length: l.length, Seq: l.seq}, true
}

// lookup is locate for the layer's own reads: a record of the open pack too (open set).
func (p *packedObjects) lookup(id ID) (loc packLocation, open, ok bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	l, ok := p.loc[id]
	if !ok || p.dead[id] {
		return packLocation{}, false, false
	}
	if l.pack == openPackNo {
		return packLocation{Offset: l.offset, Length: l.length}, true, true
	}
	return packLocation{Pack: p.packIDs[l.pack], Offset: l.offset, Length: l.length, Seq: l.seq}, false, true
}

// packed reports whether id has a record in a pack, dead or alive.
func (p *packedObjects) packed(id ID) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	_, ok := p.loc[id]
	return ok
}

// loadNamed loads the indexes of names this process has not loaded (the ones a new version's
// manifest or a rank's part names): one read each. A name that is gone (gc consolidated the
// indexes since) makes it reload them all.
func (p *packedObjects) loadNamed(names []string) error {
	var missing []string
	p.mu.RLock()
	for _, n := range names {
		if !p.named[n] {
			missing = append(missing, n)
		}
	}
	p.mu.RUnlock()
	// A damaged index found before: its packs are in the map from their own tables.
	missing = slices.DeleteFunc(missing, p.knownDamaged)
	if len(missing) == 0 {
		return nil
	}
	var got []namedIndex
	for _, n := range missing {
		x, err := loadIndex(p.records, n)
		if errors.Is(err, fs.ErrNotExist) {
			return p.reload()
		}
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupportedVersion) {
			// Never a failure: reload logs it and reads the packs no intact index names
			// from their own tables (pack_fallback.go).
			return p.reload()
		}
		if err != nil {
			return err
		}
		got = append(got, x)
	}
	slices.SortStableFunc(got, func(a, b namedIndex) int { return compareIndexNames(a.Name, b.Name) })
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.loaded); n == 0 || compareIndexNames(p.loaded[n-1].Name, got[0].Name) < 0 {
		// All newer than what is loaded (a reader following the writer): laid on top.
		for _, x := range got {
			if !p.named[x.Name] {
				p.loaded = append(p.loaded, x)
				p.addIndexLocked(x)
			}
		}
		p.overlayOwnLocked()
		return nil
	}
	indexes := slices.Clone(p.loaded)
	for _, x := range got {
		if !p.named[x.Name] {
			indexes = append(indexes, x)
		}
	}
	slices.SortStableFunc(indexes, func(a, b namedIndex) int { return compareIndexNames(a.Name, b.Name) })
	p.rebuildLocked(indexes)
	return nil
}

// syncIndexes returns the names of the index records SyncObjects wrote that no manifest
// sealed by this process names yet: the seal writes them into the manifest (sealedIndexes
// then forgets them).
func (p *packedObjects) syncIndexes() ([]string, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return slices.Clone(p.unsealed), nil
}

// sealedIndexes forgets names, now in a sealed manifest (or a part record).
func (p *packedObjects) sealedIndexes(names []string) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.unsealed = slices.DeleteFunc(p.unsealed, func(n string) bool { return slices.Contains(names, n) })
}

// StatObject is the record's length for a packed object, else the loose object's size.
func (p *packedObjects) StatObject(id ID) (int64, error) {
	if l, _, ok := p.lookup(id); ok {
		return l.Length, nil
	}
	if p.isDead(id) {
		return 0, fmt.Errorf("stat object %s: %w", id, fs.ErrNotExist)
	}
	return p.Backend.StatObject(id)
}

func (p *packedObjects) isDead(id ID) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.dead[id]
}

// ListObjects lists the live packed objects, then the loose objects not in a pack.
func (p *packedObjects) ListObjects(fn func(id ID, size int64) error) error {
	type item struct {
		id   ID
		size int64
	}
	p.mu.RLock()
	items := make([]item, 0, len(p.loc))
	for id, l := range p.loc {
		if !p.dead[id] {
			items = append(items, item{id, l.length})
		}
	}
	p.mu.RUnlock()
	for _, it := range items {
		if err := fn(it.id, it.size); err != nil {
			return err
		}
	}
	return p.Backend.ListObjects(func(id ID, size int64) error {
		if p.packed(id) {
			return nil
		}
		return fn(id, size)
	})
}

// DeleteObject marks a packed object dead (its record stays until repack) and removes a
// loose file of it, if any.
func (p *packedObjects) DeleteObject(id ID) error {
	p.mu.Lock()
	if _, ok := p.loc[id]; ok {
		p.dead[id] = true
	}
	p.mu.Unlock()
	return p.Backend.DeleteObject(id)
}

// repack rewrites the packs that hold dead records without them (gc: rewritePacks, the
// repack part), then reloads the indexes.
//
//lint:ignore U1000 the collector calls it at the end of gc (the repack helper's hook)
func (p *packedObjects) repack(mayDrop func(ID) bool) error {
	// No write of this process runs beside the rewrite: a record put meanwhile (a writer
	// storing again an object gc has just deleted) would be dropped with the dead records
	// of its id (TestGCBesideReaderAndWriter).
	p.wmu.Lock()
	locked := true
	defer func() {
		if locked {
			p.wmu.Unlock()
		}
	}()
	if err := p.syncLocked(); err != nil {
		return err
	}
	p.mu.RLock()
	if len(p.dead) == 0 {
		p.mu.RUnlock()
		return nil
	}
	indexes := slices.Clone(p.loaded)
	dead := make(map[ID]bool, len(p.dead))
	for id := range p.dead {
		dead[id] = true
	}
	p.mu.RUnlock()
	env := packEnv{be: p.Backend, packs: p.packs, records: p.records, log: p.log, nextSeq: p.nextSeq}
	if _, err := rewritePacks(env, indexes, func(id ID) bool { return !dead[id] || !mayDrop(id) }); err != nil {
		return err
	}
	p.wmu.Unlock() // reload reads the write state under wmu itself
	locked = false
	if err := p.reload(); err != nil {
		return err
	}
	p.mu.Lock()
	for id := range dead {
		// Gone from every pack, or live after all (a version sealed beside gc uses it: its
		// record was kept, and a dead mark would hide it from every read).
		if _, ok := p.loc[id]; !ok || !mayDrop(id) {
			delete(p.dead, id)
		}
	}
	p.mu.Unlock()
	return nil
}

// Close closes the open packs, then the wrapped backend. A pack being written is dropped:
// its objects belong to no sealed version.
func (p *packedObjects) Close() error {
	p.wmu.Lock()
	if p.open != nil {
		p.open.abort(p.Backend)
		p.open = nil
	}
	p.wmu.Unlock()
	p.files.close()
	return p.Backend.Close()
}
