package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// unit says how a metric's value is printed.
type unit int

const (
	unitDur     unit = iota // value in nanoseconds
	unitRate                // per second
	unitCount               // a mean count, e.g. commands per pair
	unitBytes               // bytes
	unitRatio               // a dimensionless ratio
	unitPercent             // percent of one CPU core
	unitWhole               // a count of things, e.g. writes in a run
)

// A metric is one figure of one run of a workload on one system. A figure
// that is not a number (a count "of N", "n/a") is text.
type metric struct {
	group  string // the workload, e.g. "W1 uncontended"
	name   string // e.g. "pair latency p50"
	unit   unit
	value  float64
	text   string
	detail bool // printed in the per-command section, not the main table
	// noRatio leaves the ratio out where floor's figure is about zero and
	// a ratio to it would be noise.
	noRatio bool
}

func num(group, name string, u unit, v float64) metric {
	return metric{group: group, name: name, unit: u, value: v}
}

func text(group, name, s string) metric {
	return metric{group: group, name: name, text: s}
}

func noRatio(m metric) metric {
	m.noRatio = true
	return m
}

type rowKey struct{ group, name string }

type cell struct {
	vals  map[int]float64 // by round
	texts []string        // by round, in order
}

// report gathers every round's metrics and prints them as markdown:
// median, spread (min–max) and the median of the per-round ratios to
// floor's figure in the same round.
type report struct {
	systems []string
	rows    []rowKey // in order of first appearance
	units   map[rowKey]unit
	detail  map[rowKey]bool
	noRatio map[rowKey]bool
	cells   map[rowKey]map[string]*cell
}

func newReport(systems []string) *report {
	return &report{systems: systems, units: map[rowKey]unit{}, detail: map[rowKey]bool{}, noRatio: map[rowKey]bool{},
		cells: map[rowKey]map[string]*cell{}}
}

func (r *report) add(round int, sys string, ms []metric) {
	for _, m := range ms {
		k := rowKey{m.group, m.name}
		if r.cells[k] == nil {
			r.rows = append(r.rows, k)
			r.cells[k] = map[string]*cell{}
		}
		r.detail[k] = r.detail[k] || m.detail
		if m.text == "" { // a row may start with a text cell ("n/a"), which has no unit
			r.units[k] = m.unit
			r.noRatio[k] = r.noRatio[k] || m.noRatio
		}
		c := r.cells[k][sys]
		if c == nil {
			c = &cell{vals: map[int]float64{}}
			r.cells[k][sys] = c
		}
		if m.text != "" {
			c.texts = append(c.texts, m.text)
		} else {
			c.vals[round] = m.value
		}
	}
}

func (r *report) write(w io.Writer) {
	head := "| workload | metric | " + strings.Join(r.systems, " | ") + " |\n"
	rule := "|---|---|" + strings.Repeat("---|", len(r.systems)) + "\n"
	fmt.Fprint(w, head, rule)
	for _, k := range r.rows {
		if r.detail[k] {
			continue
		}
		fmt.Fprintf(w, "| %s | %s |", k.group, k.name)
		for _, s := range r.systems {
			fmt.Fprintf(w, " %s |", r.format(k, s))
		}
		fmt.Fprintln(w)
	}
	var details []rowKey
	for _, k := range r.rows {
		if r.detail[k] {
			details = append(details, k)
		}
	}
	if len(details) == 0 {
		return
	}
	fmt.Fprint(w, "\nServer commands by name (commandstats, script-internal commands included; last round):\n\n")
	fmt.Fprint(w, head, rule)
	for _, k := range details {
		fmt.Fprintf(w, "| %s | %s |", k.group, k.name)
		for _, s := range r.systems {
			fmt.Fprintf(w, " %s |", r.format(k, s))
		}
		fmt.Fprintln(w)
	}
}

// format prints one cell: "median (min–max) ×ratio", or its text when it
// is not a number. Texts that differ between rounds are all shown.
func (r *report) format(k rowKey, sys string) string {
	c := r.cells[k][sys]
	switch {
	case c == nil:
		return "—"
	case len(c.texts) > 0 && r.detail[k]:
		return c.texts[len(c.texts)-1]
	case len(c.texts) > 0 && len(slices.Compact(slices.Clone(c.texts))) == 1:
		return c.texts[0]
	case len(c.texts) > 0:
		return strings.Join(c.texts, "; ")
	case len(c.vals) == 0:
		return "—"
	}
	u := r.units[k]
	vals := make([]float64, 0, len(c.vals))
	for _, v := range c.vals {
		vals = append(vals, v)
	}
	slices.Sort(vals)
	s := formatValue(u, median(vals))
	if len(vals) > 1 {
		s += fmt.Sprintf(" (%s–%s)", formatValue(u, vals[0]), formatValue(u, vals[len(vals)-1]))
	}
	if sys == "floor" || r.noRatio[k] {
		return s
	}
	if f := r.cells[k]["floor"]; f != nil {
		var ratios []float64
		for round, v := range c.vals {
			if fv, ok := f.vals[round]; ok && fv > 0 {
				ratios = append(ratios, v/fv)
			}
		}
		if len(ratios) > 0 {
			slices.Sort(ratios)
			s += fmt.Sprintf(" ×%.2f", median(ratios))
		}
	}
	return s
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func formatValue(u unit, v float64) string {
	switch u {
	case unitDur:
		d := time.Duration(v)
		switch {
		case d < time.Millisecond:
			return fmt.Sprintf("%.0f µs", v/1e3)
		case d < 10*time.Millisecond:
			return fmt.Sprintf("%.2f ms", v/1e6)
		case d < time.Second:
			return fmt.Sprintf("%.0f ms", v/1e6)
		}
		return fmt.Sprintf("%.2f s", v/1e9)
	case unitRate:
		return fmt.Sprintf("%.0f/s", v)
	case unitCount:
		return fmt.Sprintf("%.2f", v)
	case unitBytes:
		return fmt.Sprintf("%.0f B", math.Round(v)+0) // +0: no "-0 B"
	case unitPercent:
		return fmt.Sprintf("%.1f%%", v) // a target such as the renewal's 7% needs the decimal
	case unitWhole:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
