package views

// NavClocks is the clocks page's section.
const NavClocks Nav = "clocks"

// ClocksPage lists the holders whose backends record their own clock, by
// how far it runs from leasewatch's, largest first.
type ClocksPage struct {
	Live   Live
	Now    Stamp
	Window string // "10m"
	Rows   []ClockRow
	// Total is how many holders the filter selects; Rows are the first.
	Total   int
	Classes []Link // all, locks, heartbeats
	// Dropped is how many holders were past the estimator's cap.
	Dropped int
}

// ClockRow is one holder's clock estimate.
type ClockRow struct {
	Source, Holder, HolderURL string
	Heartbeat                 bool
	// Offset is signed ("+297 ms", "-202 ms"); Ahead says which way.
	Offset string
	Ahead  bool
	Bound  string // "" until renewals in two minutes
	// Samples renewals in Minutes minutes of the window.
	Samples, Minutes int
	Last             Stamp
}
