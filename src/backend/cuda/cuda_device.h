#pragma once
#include <cstddef>
#include <string>

// Device, stream, pinned-memory and graph plumbing of the CUDA backend; no CUDA header needed by callers.
namespace tf::cuda {

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0, sm_count = 0;
  size_t total_bytes = 0, free_bytes = 0;
};
DeviceInfo device_info(int device = 0);  // throws when there is no such device

void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* p);
// Copies ordered on the launch stream; stream_sync waits for everything queued there.
void copy_to_device_async(void* dst, const void* src, size_t bytes);
void copy_to_host_async(void* dst, const void* src, size_t bytes);
void stream_sync();

// Records every launch on the stream between begin and end into a replayable graph.
void capture_begin();
void* capture_end();
void capture_abort() noexcept;  // ends a capture that failed part way and drops what it recorded
void graph_launch(void* graph);
void graph_destroy(void* graph);

// Stream-ordered timing: an event recorded now, and milliseconds between two recorded events (after a sync).
void* event_record_now();
float event_ms(void* start, void* stop);
void event_destroy(void* e);

// Work beside the launch stream's chain (L2 prefetches): side_fork makes the next side launches wait for everything
// launched so far; side_join makes the launch stream wait for every side launch (false if CUDA refused).
void side_fork();
bool side_join() noexcept;
struct SideJoin {  // joins at scope exit (also when a launch throws) unless done: side work never outlives its round
  bool on = true;
  ~SideJoin() {
    if (on) side_join();
  }
};
struct SideLaunches {  // between side_fork and side_join: this thread's kernel launches go to the side stream
  SideLaunches();
  ~SideLaunches();
  bool was;  // the scope outside this one
  SideLaunches(const SideLaunches&) = delete;
  SideLaunches& operator=(const SideLaunches&) = delete;
};
// TF_CUDA_PREFETCH: 0 leaves one-row products' weights to be read from DRAM, 1 pulls them into L2 first; unset, 1
// only with TF_MMA_PREWAIT=0.
int prefetch_mode();
void set_prefetch_mode(int mode);  // for tests: 0 or 1 over the environment's choice, -1 back to it

// Reads TF_ATTN_BUILD, TF_MMA_SPLIT, TF_MMA_WGMMA, TF_CUDA_PDL, TF_CUDA_PREFETCH, TF_MMA_PREWAIT and TF_CUDA_PROMPT_F16
// now (no device work): tf::Error names a bad value.
void read_switches();

// Median device-to-device copy rate over a 2 GiB buffer, bytes read plus written per second.
double copy_bandwidth();

}  // namespace tf::cuda
