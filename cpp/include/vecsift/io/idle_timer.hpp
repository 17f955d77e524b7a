// A deadline one thread sleeps until while others move it, without waking it.
//
// For buffered writers that flush from the calling threads while they are busy and from a
// background thread only when they go idle: the callers arm the timer when they queue the first
// item after a flush and clear it when they flush themselves; the background thread blocks in
// wait() and returns only once a deadline has really passed. Moving the deadline later or
// clearing it never wakes the waiter; when it wakes at the old deadline it goes back to sleep
// here, so a busy process pays nothing for its idle writer (a waiter that had to run code of its
// own to find out would compete with the callers for their locks every period).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace vecsift {

class IdleTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // The deadline becomes `seconds` from now (replacing any other). Wakes the waiter only when that
  // is earlier than the deadline it sleeps until (or it sleeps with none).
  void set_in(double seconds) {
    const auto d = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    bool wake;
    {
      std::lock_guard<std::mutex> lk(m_);
      wake = !armed_ || d < deadline_;
      deadline_ = d;
      armed_ = true;
    }
    if (wake) cv_.notify_one();
  }

  // set_in(seconds) unless a deadline is set already (the first item queued since a flush sets it,
  // later ones leave it). Returns whether it set one.
  bool arm_in(double seconds) {
    {
      std::lock_guard<std::mutex> lk(m_);
      if (armed_) return false;
    }
    set_in(seconds);
    return true;
  }

  // No deadline: the waiter sleeps until the next set_in() (it is not woken for this).
  void clear() {
    std::lock_guard<std::mutex> lk(m_);
    armed_ = false;
  }

  // Blocks until the deadline passes (true; the timer is then cleared) or close() (false).
  bool wait() {
    std::unique_lock<std::mutex> lk(m_);
    while (!closed_) {
      if (!armed_) {
        cv_.wait(lk);
        continue;
      }
      if (Clock::now() >= deadline_) {
        armed_ = false;
        return true;
      }
      const auto d = deadline_;
      cv_.wait_until(lk, d);
    }
    return false;
  }

  // Wakes the waiter for good: wait() returns false from now on.
  void close() {
    {
      std::lock_guard<std::mutex> lk(m_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  bool armed() {
    std::lock_guard<std::mutex> lk(m_);
    return armed_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  Clock::time_point deadline_{};
  bool armed_ = false;
  bool closed_ = false;
};

}  // namespace vecsift
