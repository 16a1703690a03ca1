package metrics

import "github.com/prometheus/client_golang/prometheus"

// S3Stats are the traffic counters of an S3 store since it was opened, as the store counts
// them (the caller adapts the store's own type: the backend's package is not this one's
// business).
type S3Stats struct {
	Requests      int64 // HTTP requests sent, retries included
	ResponseBytes int64 // every response body
	Uploads       int64 // objects, manifests and lease writes
	UploadBytes   int64
	Downloads     int64 // whole objects fetched into the local object cache
	Packs         int64 // whole packs fetched into it (store format 3)
	DownloadBytes int64 // object and pack bytes fetched (whole and ranges)
	Manifests     int64 // manifests fetched
	ManifestBytes int64
	Retries       int64 // transient errors that were retried
	Failures      int64 // requests that still failed when the retry time ran out
	CacheHits     int64 // object opens served from the local object cache
}

// addS3 exports an S3 store's traffic; stats returns ok false for a store that is not in S3
// (then nothing is reported).
func (m *Metrics) addS3(stats func() (S3Stats, bool)) {
	var (
		reqs      = desc("s3_requests_total", "HTTP requests sent to S3, retries included.")
		respBytes = desc("s3_response_bytes_total", "Bytes of every S3 response body (objects, manifests, listings, errors).")
		uploads   = desc("s3_uploads_total", "Objects, manifests and lease records written to S3.")
		upBytes   = desc("s3_upload_bytes_total", "Bytes written to S3.")
		downloads = desc("s3_downloads_total", "Downloads from S3 by kind: object (a whole object fetched into the local object cache), pack (a whole pack fetched into it) or manifest.", "kind")
		downBytes = desc("s3_download_bytes_total", "Bytes downloaded from S3 by kind: object (whole objects, packs and ranges) or manifest.", "kind")
		retries   = desc("s3_retries_total", "S3 requests that failed with a transient error and were retried.")
		failures  = desc("s3_failures_total", "S3 requests that still failed when their retry time ran out.")
	)
	m.reg.MustRegister(&scrapeCollector{
		descs: []*prometheus.Desc{reqs, respBytes, uploads, upBytes, downloads, downBytes, retries, failures},
		collect: func(ch chan<- prometheus.Metric) {
			st, ok := stats()
			if !ok {
				return
			}
			counter(ch, reqs, st.Requests)
			counter(ch, respBytes, st.ResponseBytes)
			counter(ch, uploads, st.Uploads)
			counter(ch, upBytes, st.UploadBytes)
			counter(ch, downloads, st.Downloads, "object")
			counter(ch, downloads, st.Packs, "pack")
			counter(ch, downloads, st.Manifests, "manifest")
			counter(ch, downBytes, st.DownloadBytes, "object")
			counter(ch, downBytes, st.ManifestBytes, "manifest")
			counter(ch, retries, st.Retries)
			counter(ch, failures, st.Failures)
		},
	})
}
