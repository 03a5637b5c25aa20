#pragma once

// The faster of two ways to run a kernel, found per problem by timing both on its first calls, as
// cuDNN's benchmark mode and oneDNN's own dispatch by shape do. Kept for the process's lifetime:
// a training run meets the same few shapes every iteration.

#include <algorithm>
#include <array>
#include <limits>
#include <map>

namespace partita::runtime {

template <class Key> class FasterWay {
public:
  // Each way is timed `trials` times, alternately (0, 1, 0, 1, ...), so that a passing disturbance
  // of the host slows both rather than one; the lowest time of each decides.
  explicit FasterWay(int trials = 3) : m_trials(std::max(1, trials)) {}

  // The way to run `key` now: the chosen one once decided, else the next to time.
  int way(const Key& key) const {
    const auto it = m_state.find(key);
    if (it == m_state.end()) {
      return 0;
    }
    const State& s = it->second;
    return s.chosen >= 0 ? s.chosen : s.timed % 2;
  }
  bool decided(const Key& key) const {
    const auto it = m_state.find(key);
    return it != m_state.end() && it->second.chosen >= 0;
  }
  // The time a call of `key` run the way way(key) gave took; ignored once decided.
  void timed(const Key& key, double seconds) {
    State& s = m_state[key];
    if (s.chosen >= 0) {
      return;
    }
    double& best = s.best[static_cast<std::size_t>(s.timed % 2)];
    best = std::min(best, seconds);
    if (++s.timed == 2 * m_trials) {
      s.chosen = s.best[1] < s.best[0] ? 1 : 0;
    }
  }

private:
  struct State {
    std::array<double, 2> best{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    int timed = 0;
    int chosen = -1;
  };
  int m_trials;
  std::map<Key, State> m_state;
};

} // namespace partita::runtime
