package metrics_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redfence/redfence/metrics"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

func Example() {
	mr := miniredis.NewMiniRedis()
	_ = mr.Start()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// Any MeterProvider; the SDK's with a manual reader here.
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := metrics.New(provider)
	if err != nil {
		panic(err)
	}
	locks, err := reentrant.New(rdb, m.Option())
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	store := m.Store("invoices", memory.New())
	ctx := context.Background()

	lease, _ := locks.Lock(ctx, "invoice-42")
	inner, _ := locks.Lock(lease.Context(), "invoice-42") // reentered
	_, err = locks.TryLock(ctx, "invoice-42")             // another owner: refused
	fmt.Println("trylock:", err != nil)
	_ = inner.Unlock(ctx)
	_ = lease.Unlock(ctx) // released

	next, _ := locks.Lock(ctx, "invoice-42")
	_ = store.Put(ctx, "invoice-42", []byte("refunded"), next.Token())
	_ = store.Put(ctx, "invoice-42", []byte("late"), lease.Token()) // stale
	_ = next.Unlock(ctx)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, line := range summarize(rm) {
		fmt.Println(line)
	}
	// Output:
	// trylock: true
	// redfence.lock.acquisitions{outcome=acquired} 2
	// redfence.lock.acquisitions{outcome=not_acquired} 1
	// redfence.lock.acquisitions{outcome=reentered} 1
	// redfence.lock.releases{} 2
	// redfence.lock.wait{outcome=acquired} count 2
	// redfence.lock.wait{outcome=not_acquired} count 1
	// redfence.lock.wait{outcome=reentered} count 1
	// redfence.store.stale_refused{store=invoices} 1
}

// summarize returns one sorted line per data point: counters' sums and
// histograms' counts.
func summarize(rm metricdata.ResourceMetrics) []string {
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Count))
				}
			}
		}
	}
	slices.Sort(lines)
	return lines
}
