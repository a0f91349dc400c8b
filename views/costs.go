package views

// TopWriters is the overview's list of the locks whose backends received
// the most writes (grants, renewals, releases) over the last hour.
type TopWriters struct {
	Shown bool // false: not counted yet, or the store cannot count them
	Rows  []WriterRow
	// Total is every lock's writes of the hour and their rate, in words.
	Total string
	// More links to the API's full list, by namespace.
	More string
}

// WriterRow is one lock's writes over the hour.
type WriterRow struct {
	ID                         int64
	Source, Name               string
	Writes                     string // e.g. "1,234"
	PerSecond                  string // e.g. "0.34/s"
	Grants, Renewals, Releases string
}
