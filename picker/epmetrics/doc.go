// Package epmetrics exports the Prometheus series of the upstream Gateway
// API Inference Extension endpoint picker (v1.5.0) under the same names,
// labels and buckets, so dashboards and alerts written for it work against
// inferpick unchanged. inferpick's own inferpick_* series stay the reference
// for what inferpick does; these are the compatible view.
//
// Request series are recorded through Recorder and RequestSeries by the
// ext_proc server; pool series are read from the registry at scrape time by
// PoolCollector.
package epmetrics
