// Exact min-sum over a pairwise cost graph by variable elimination (dynamic programming over a
// vertex ordering with dependent sets). Each step eliminates the vertex whose table would be
// smallest; the table holds, for every configuration of its dependent set, the best cost of the
// eliminated part. Which value of the eliminated vertex gives it is not kept per entry: on the way
// back, with its dependent set decided, it is found again from the step's factors (one row each).

#include "partita/search/dp.h"

#include "partita/graph/error.h"
#include "search/dp_detail.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <set>
#include <unordered_map>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace partita::search::dp {

int Problem::add_vertex(int domain_size, std::string name) {
  domain.push_back(domain_size);
  names.push_back(std::move(name));
  unary.push_back(-1);
  return static_cast<int>(domain.size()) - 1;
}

int Problem::add_table(std::vector<double> costs) {
  tables.emplace_back(costs.begin(), costs.end());
  return static_cast<int>(tables.size()) - 1;
}

int Problem::add_zero_table(std::size_t entries) {
  tables.emplace_back(entries, 0.0);
  return static_cast<int>(tables.size()) - 1;
}

constexpr double infinity = std::numeric_limits<double>::infinity();

namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;

// Memory on whole huge pages where the system gives them (Linux's transparent huge pages, asked
// for with madvise; without them the memory is as good).
void* huge_pages(std::size_t bytes) {
  void* p = std::aligned_alloc(huge_page, bytes);
  if (p == nullptr) {
    throw std::bad_alloc();
  }
#ifdef __linux__
  ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

// Tables of 64 KiB to 1 MiB, a search's thousands of edge tables and a solve's factors: blocks of
// a power of two cut from huge pages, each kept once freed for the next table of its size (on 4
// KiB pages such tables faulted a page at a time, a fifth of a search at 64 devices on a virtual
// machine; glibc's heap hands their memory back and faults it in again). The memory stays with the
// process, as much as the most its searches held at once.
class MediumBlocks {
public:
  static constexpr std::size_t smallest = std::size_t{64} << 10, largest = std::size_t{1} << 20;
  static constexpr int classes = 5; // 64 KiB .. 1 MiB

  void* take(std::size_t bytes) {
    const int c = size_class(bytes);
    const std::lock_guard lock(m_mutex);
    if (m_free[c] == nullptr) {
      char* page = static_cast<char*>(huge_pages(huge_page));
      const std::size_t block = smallest << c;
      for (std::size_t at = huge_page; at >= block;) {
        at -= block;
        push(c, page + at);
      }
    }
    Free* f = m_free[c];
    m_free[c] = f->next;
    return f;
  }
  void give(void* p, std::size_t bytes) noexcept {
    const std::lock_guard lock(m_mutex);
    push(size_class(bytes), p);
  }

private:
  struct Free {
    Free* next;
  };
  static int size_class(std::size_t bytes) {
    int c = 0;
    while ((smallest << c) < bytes) {
      ++c;
    }
    return c;
  }
  void push(int c, void* p) noexcept {
    Free* f = ::new (p) Free{m_free[c]};
    m_free[c] = f;
  }
  std::mutex m_mutex;
  std::array<Free*, classes> m_free{};
};

// Never destroyed: a table freed while the program exits still finds it.
MediumBlocks& medium_blocks() {
  static auto* blocks = new MediumBlocks;
  return *blocks;
}

// Tables over 1 MiB: whole huge pages, kept once freed for the next table of the same number of
// them, up to `kept_most` bytes in all (beyond, handed back to the system). A re-plan builds the
// tables the search before it built, of the same sizes or nearly (the GUI's sliders): given back,
// each was faulted in and zeroed again, 2 MiB at a time, a tenth of a re-plan of ResNet-50 at 64
// devices on a virtual machine. What is kept idle adds to a search's peak memory, by up to that
// much: 256 MiB added 90-100 MiB to the peaks at 1,024 devices, whose searches take seconds.
class HugeBlocks {
public:
  static constexpr std::size_t kept_most = std::size_t{64} << 20;

  void* take(std::size_t bytes) { // a whole number of huge pages
    {
      const std::lock_guard lock(m_mutex);
      const auto it = m_free.find(bytes);
      if (it != m_free.end()) {
        void* p = it->second;
        m_free.erase(it);
        m_kept -= bytes;
        return p;
      }
    }
    return huge_pages(bytes);
  }
  void give(void* p, std::size_t bytes) noexcept {
    {
      const std::lock_guard lock(m_mutex);
      if (m_kept + bytes <= kept_most) {
        try {
          m_free.emplace(bytes, p);
          m_kept += bytes;
          return;
        } catch (const std::bad_alloc&) {
          // no room to remember it: it goes back to the system
        }
      }
    }
    std::free(p);
  }

private:
  std::mutex m_mutex;
  std::multimap<std::size_t, void*> m_free; // by size, in huge pages' bytes
  std::size_t m_kept = 0;
};

// Never destroyed, as medium_blocks().
HugeBlocks& huge_blocks() {
  static auto* blocks = new HugeBlocks;
  return *blocks;
}

std::size_t whole_huge_pages(std::size_t bytes) {
  return (bytes + huge_page - 1) / huge_page * huge_page;
}

} // namespace

void* allocate_table(std::size_t bytes) {
  if (bytes < MediumBlocks::smallest) {
    return ::operator new(bytes);
  }
  if (bytes <= MediumBlocks::largest) {
    return medium_blocks().take(bytes);
  }
  return huge_blocks().take(whole_huge_pages(bytes));
}

void free_table(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) {
    return;
  }
  if (bytes < MediumBlocks::smallest) {
    ::operator delete(p);
  } else if (bytes <= MediumBlocks::largest) {
    medium_blocks().give(p, bytes);
  } else {
    huge_blocks().give(p, whole_huge_pages(bytes));
  }
}

namespace {

using detail::vertex_name;

// A cost table over `scope` (row-major: the last vertex of the scope varies fastest).
struct Factor {
  std::vector<int> scope;
  const double* data = nullptr;
  Buffer owned;
  bool alive = true;
  int sig = -1; // how it was made (Eliminator::intern): factors of one signature hold the same costs
};

// What eliminating a vertex left behind: the factors it summed, in the order it summed them (its
// own costs first), so that once its scope is decided its best value is found again from them.
struct Step {
  int vertex = 0;
  std::vector<const Factor*> factors;
};

// The two scans below decide most of a wide graph's search time. Where the compiler can, each is
// built twice, for AVX2 (four doubles a register) and for the baseline (SSE2), and the loader picks
// the one the processor runs; min is exact in any order, so the two give the same result.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define PARTITA_WIDE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PARTITA_WIDE_CLONES
#endif

// The least of row[0 .. n) (n >= 1).
PARTITA_WIDE_CLONES double least(const double* row, std::size_t n) {
  using Wide = double __attribute__((vector_size(32))); // four doubles: two SSE2 registers without AVX
  std::size_t x = 0;
  double m = row[0];
  if (n >= 8) {
    Wide a, b;
    std::memcpy(&a, row, sizeof a);
    std::memcpy(&b, row + 4, sizeof b);
    for (x = 8; x + 8 <= n; x += 8) {
      Wide c, d;
      std::memcpy(&c, row + x, sizeof c);
      std::memcpy(&d, row + x + 4, sizeof d);
      a = c < a ? c : a;
      b = d < b ? d : b;
    }
    a = b < a ? b : a;
    m = std::min(std::min(a[0], a[1]), std::min(a[2], a[3]));
  }
  for (; x < n; ++x) {
    m = std::min(m, row[x]);
  }
  return m;
}

// The least of a[x] + b[x] over x in [0, n) (n >= 1).
PARTITA_WIDE_CLONES double least_sum(const double* a, const double* b, std::size_t n) {
  using Wide = double __attribute__((vector_size(32)));
  std::size_t x = 0;
  double m = a[0] + b[0];
  if (n >= 8) {
    Wide p, q, u, v;
    std::memcpy(&p, a, sizeof p);
    std::memcpy(&u, b, sizeof u);
    std::memcpy(&q, a + 4, sizeof q);
    std::memcpy(&v, b + 4, sizeof v);
    p += u;
    q += v;
    for (x = 8; x + 8 <= n; x += 8) {
      Wide c, d, e, f;
      std::memcpy(&c, a + x, sizeof c);
      std::memcpy(&e, b + x, sizeof e);
      std::memcpy(&d, a + x + 4, sizeof d);
      std::memcpy(&f, b + x + 4, sizeof f);
      c += e;
      d += f;
      p = c < p ? c : p;
      q = d < q ? d : q;
    }
    p = q < p ? q : p;
    m = std::min(std::min(p[0], p[1]), std::min(p[2], p[3]));
  }
  for (; x < n; ++x) {
    m = std::min(m, a[x] + b[x]);
  }
  return m;
}

// least_sum of `a` with each of four rows b[0 .. 4), into out[0 .. 4): a step's entries along
// its scope's last vertex read the same sums of the eliminated vertex's other costs (`a`) with
// four columns of the factor that reads that vertex, so each load of `a` serves four entries, and
// the horizontal least of a register is taken once per entry, not per call. Each entry's sums are
// the ones least_sum adds, and min is exact in any order: the same results.
PARTITA_WIDE_CLONES void least_sums4(const double* a, const double* const* b, std::size_t n, double* out) {
  using Wide = double __attribute__((vector_size(32)));
  std::size_t x = 0;
  double m[4];
  for (std::size_t j = 0; j < 4; ++j) {
    m[j] = a[0] + b[j][0];
  }
  if (n >= 8) {
    Wide p[4], q[4];
    Wide u, v;
    std::memcpy(&u, a, sizeof u);
    std::memcpy(&v, a + 4, sizeof v);
    for (std::size_t j = 0; j < 4; ++j) {
      Wide c, d;
      std::memcpy(&c, b[j], sizeof c);
      std::memcpy(&d, b[j] + 4, sizeof d);
      p[j] = u + c;
      q[j] = v + d;
    }
    for (x = 8; x + 8 <= n; x += 8) {
      std::memcpy(&u, a + x, sizeof u);
      std::memcpy(&v, a + x + 4, sizeof v);
      for (std::size_t j = 0; j < 4; ++j) {
        Wide c, d;
        std::memcpy(&c, b[j] + x, sizeof c);
        std::memcpy(&d, b[j] + x + 4, sizeof d);
        c += u;
        d += v;
        p[j] = c < p[j] ? c : p[j];
        q[j] = d < q[j] ? d : q[j];
      }
    }
    for (std::size_t j = 0; j < 4; ++j) {
      const Wide r = q[j] < p[j] ? q[j] : p[j];
      m[j] = std::min(std::min(r[0], r[1]), std::min(r[2], r[3]));
    }
  }
  for (; x < n; ++x) {
    for (std::size_t j = 0; j < 4; ++j) {
      m[j] = std::min(m[j], a[x] + b[j][x]);
    }
  }
  for (std::size_t j = 0; j < 4; ++j) {
    out[j] = m[j];
  }
}

// least_sums4 for two rows a0 and a1 with the same four columns b[0 .. 4), into out0 and out1:
// two entries of a step that differ in a scope vertex that the factor read along the columns does
// not read (two rows of a product in the (min, +) algebra), so each load of a column serves both.
PARTITA_WIDE_CLONES void least_sums2x4(const double* a0, const double* a1, const double* const* b, std::size_t n,
                                       double* out0, double* out1) {
  using Wide = double __attribute__((vector_size(32)));
  std::size_t x = 0;
  double m0[4], m1[4];
  for (std::size_t j = 0; j < 4; ++j) {
    m0[j] = a0[0] + b[j][0];
    m1[j] = a1[0] + b[j][0];
  }
  if (n >= 4) {
    Wide p[4], q[4];
    Wide u, v;
    std::memcpy(&u, a0, sizeof u);
    std::memcpy(&v, a1, sizeof v);
    for (std::size_t j = 0; j < 4; ++j) {
      Wide c;
      std::memcpy(&c, b[j], sizeof c);
      p[j] = u + c;
      q[j] = v + c;
    }
    for (x = 4; x + 4 <= n; x += 4) {
      std::memcpy(&u, a0 + x, sizeof u);
      std::memcpy(&v, a1 + x, sizeof v);
      for (std::size_t j = 0; j < 4; ++j) {
        Wide c;
        std::memcpy(&c, b[j] + x, sizeof c);
        const Wide d = u + c, e = v + c;
        p[j] = d < p[j] ? d : p[j];
        q[j] = e < q[j] ? e : q[j];
      }
    }
    for (std::size_t j = 0; j < 4; ++j) {
      m0[j] = std::min(std::min(p[j][0], p[j][1]), std::min(p[j][2], p[j][3]));
      m1[j] = std::min(std::min(q[j][0], q[j][1]), std::min(q[j][2], q[j][3]));
    }
  }
  for (; x < n; ++x) {
    for (std::size_t j = 0; j < 4; ++j) {
      m0[j] = std::min(m0[j], a0[x] + b[j][x]);
      m1[j] = std::min(m1[j], a1[x] + b[j][x]);
    }
  }
  for (std::size_t j = 0; j < 4; ++j) {
    out0[j] = m0[j];
    out1[j] = m1[j];
  }
}

// The classes of the values c of a factor's scope vertex whose slices are the same, bit for bit:
// `along` apart in f's `size` entries (its last vertex, of `width` values, consecutive), `values`
// of them.
// firsts: each class's first value, in order; class_of: per value, its class. Hashed on one slice
// each, then checked entry for entry against the class's first (a value whose slice differs,
// however its hash fell, is a class of its own).
void same_columns(const Factor& f, std::size_t size, std::size_t along, std::size_t values, std::size_t width,
                  std::vector<std::size_t>& firsts, std::vector<std::size_t>& class_of) {
  // Hashed on its first slice (the rest of the scope at its first values): the check below reads
  // every slice.
  std::vector<std::uint64_t> hash(values, 0);
  for (std::size_t c = 0; c < values; ++c) {
    const double* e = f.data + c * along;
    std::array<std::uint64_t, 4> lane{1, 2, 3, 4};
    std::size_t x = 0;
    for (; x + 4 <= width; x += 4) {
      for (std::size_t l = 0; l < 4; ++l) {
        std::uint64_t bits = 0;
        std::memcpy(&bits, e + x + l, sizeof bits);
        lane[l] = (lane[l] ^ bits) * 0x9E3779B97F4A7C15ULL;
      }
    }
    for (; x < width; ++x) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, e + x, sizeof bits);
      lane[0] = (lane[0] ^ bits) * 0x9E3779B97F4A7C15ULL;
    }
    hash[c] = lane[0] ^ (lane[1] >> 1) ^ (lane[2] << 1) ^ (lane[3] >> 3);
  }
  const auto value_of = [&](std::size_t row) { return row * width / along % values; };
  std::unordered_map<std::uint64_t, std::size_t> first_of; // hash: its first value
  std::vector<std::size_t> first(values);
  for (std::size_t c = 0; c < values; ++c) {
    first[c] = first_of.try_emplace(hash[c], c).first->second;
  }
  for (std::size_t row = 0; row * width < size; ++row) {
    const std::size_t c = value_of(row);
    if (first[c] != c &&
        std::memcmp(f.data + row * width, f.data + row * width - (c - first[c]) * along, width * sizeof(double)) != 0) {
      first[c] = c;
    }
  }
  firsts.clear();
  class_of.assign(values, 0);
  std::vector<std::size_t> index(values, 0);
  for (std::size_t c = 0; c < values; ++c) {
    if (first[c] == c) {
      index[c] = firsts.size();
      firsts.push_back(c);
    }
    class_of[c] = index[first[c]];
  }
}

class Eliminator {
public:
  Eliminator(const Problem& p, const Options& o)
      : m_p(p), m_o(o), m_n(p.domain.size()), m_options_reuse(o.reuse_repeated_steps) {
    m_unary.resize(m_n);
    m_unary_sig.resize(m_n);
    m_factors_of.resize(m_n);
    m_neighbours.resize(m_n);
    for (std::size_t v = 0; v < m_n; ++v) {
      const auto d = static_cast<std::size_t>(p.domain[v]);
      if (p.unary[v] >= 0) {
        const auto& own = p.tables[static_cast<std::size_t>(p.unary[v])];
        m_unary[v].assign(own.begin(), own.end());
      } else {
        m_unary[v].assign(d, 0.0);
      }
      m_unary_sig[v] = intern({0, p.unary[v], p.domain[v]});
    }
    for (const auto& e : p.edges) {
      // A vertex with one value has no choice to make: its edges are costs of the other end alone
      // (a constant shared by every block, say, would otherwise tie all blocks together).
      const auto& table = p.tables[static_cast<std::size_t>(e.table)];
      const auto du = static_cast<std::size_t>(p.domain[static_cast<std::size_t>(e.u)]);
      const auto dv = static_cast<std::size_t>(p.domain[static_cast<std::size_t>(e.v)]);
      if (du == 1 || dv == 1) {
        if (du == 1 && dv == 1) {
          m_constant += table[0];
        } else {
          const auto t = static_cast<std::size_t>(du == 1 ? e.v : e.u);
          auto& target = m_unary[t];
          for (std::size_t x = 0; x < target.size(); ++x) {
            target[x] += table[x];
          }
          m_unary_sig[t] = intern({1, m_unary_sig[t], e.table});
        }
        continue;
      }
      auto f = std::make_unique<Factor>();
      f->scope = {e.u, e.v};
      f->data = p.tables[static_cast<std::size_t>(e.table)].data();
      f->sig = intern({2, e.table});
      add_factor(std::move(f));
    }
    m_eliminated.assign(m_n, false);
    for (std::size_t v = 0; v < m_n; ++v) {
      m_queue.insert({step_size(static_cast<int>(v)), static_cast<int>(v)});
    }
  }

  Solution run() {
    Solution s;
    s.choice.assign(m_n, 0);
    double constant = m_constant;
    std::size_t done = 0;
    while (!m_queue.empty()) {
      const int v = m_queue.begin()->second;
      m_queue.erase(m_queue.begin());
      constant += eliminate(v);
      ++done;
      if (m_o.progress && (done % 64 == 0 || done == m_n)) {
        m_o.progress(static_cast<double>(done) / static_cast<double>(m_n));
      }
    }
    // Last eliminated first: every vertex of a step's scope is decided by then. Its best value is
    // the first least sum of its factors there, summed in the order the step summed them, so it is
    // the value the step's table holds the least of (the same additions, the same ties).
    std::vector<double> sum;
    for (auto it = m_steps.rbegin(); it != m_steps.rend(); ++it) {
      const auto vi = static_cast<std::size_t>(it->vertex);
      const auto dv = static_cast<std::size_t>(m_p.domain[vi]);
      sum.assign(m_unary[vi].begin(), m_unary[vi].end());
      for (const Factor* f : it->factors) {
        std::size_t base = 0, stride_v = 0, stride = 1;
        for (std::size_t j = f->scope.size(); j-- > 0;) {
          const auto u = static_cast<std::size_t>(f->scope[j]);
          if (u == vi) {
            stride_v = stride;
          } else {
            base += static_cast<std::size_t>(s.choice[u]) * stride;
          }
          stride *= static_cast<std::size_t>(m_p.domain[u]);
        }
        for (std::size_t x = 0; x < dv; ++x) {
          sum[x] += f->data[base + x * stride_v];
        }
      }
      std::size_t best = 0;
      for (std::size_t x = 1; x < dv; ++x) {
        if (sum[x] < sum[best]) {
          best = x;
        }
      }
      s.choice[vi] = static_cast<int>(best);
    }
    s.cost = constant;
    s.stats = m_stats;
    s.stats.reused_steps = m_stats_reused;
    return s;
  }

  Eliminator(const Eliminator&) = delete;
  Eliminator& operator=(const Eliminator&) = delete;
  // The tables go back to the workspace for the next solve.
  ~Eliminator() {
    for (auto& f : m_factors) {
      give_back(std::move(f->owned));
    }
  }

private:
  // A buffer of n doubles (its contents undefined): the workspace's smallest that holds n, else
  // fresh memory.
  Buffer take(std::size_t n) {
    Buffer b;
    if (m_o.workspace != nullptr) {
      auto& buffers = m_o.workspace->buffers;
      std::size_t fit = buffers.size();
      for (std::size_t i = 0; i < buffers.size(); ++i) {
        if (buffers[i].capacity() >= n && (fit == buffers.size() || buffers[i].capacity() < buffers[fit].capacity())) {
          fit = i;
        }
      }
      if (fit < buffers.size()) {
        b = std::move(buffers[fit]);
        buffers[fit] = std::move(buffers.back());
        buffers.pop_back();
      }
    }
    b.resize(n);
    return b;
  }

  void give_back(Buffer b) {
    if (m_o.workspace != nullptr && b.capacity() > 0) {
      m_o.workspace->buffers.push_back(std::move(b));
    }
  }

  void add_factor(std::unique_ptr<Factor> f) {
    const int id = static_cast<int>(m_factors.size());
    for (int u : f->scope) {
      m_factors_of[static_cast<std::size_t>(u)].push_back(id);
      for (int w : f->scope) {
        if (w != u) {
          m_neighbours[static_cast<std::size_t>(u)].insert(w);
        }
      }
    }
    m_live_bytes += static_cast<double>(f->owned.size()) * sizeof(double);
    m_factors.push_back(std::move(f));
  }

  // Entries of the table eliminating v would build, times v's domain: the work of that step.
  double step_size(int v) const {
    double size = m_p.domain[static_cast<std::size_t>(v)];
    for (int u : m_neighbours[static_cast<std::size_t>(v)]) {
      size *= m_p.domain[static_cast<std::size_t>(u)];
    }
    return size;
  }

  void check_cancel() const {
    if (m_o.cancel != nullptr && m_o.cancel->load(std::memory_order_relaxed)) {
      throw Cancelled();
    }
  }

  // A copy of factor f with vertex v moved to the end of its scope (the others in their order).
  std::unique_ptr<Factor> with_last(const Factor& f, int v) {
    auto t = std::make_unique<Factor>();
    t->scope = detail::scope_with_last(f.scope, v);
    std::size_t size = 1;
    for (const int u : f.scope) {
      size *= static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(u)]);
    }
    t->owned = take(size);
    detail::copy_with_last(m_p, f.scope, f.data, v, t->owned.data());
    t->data = t->owned.data();
    return t;
  }

  // Eliminates v; returns the cost that no longer depends on any vertex (when v has no neighbours).
  double eliminate(int v) {
    check_cancel();
    const auto vi = static_cast<std::size_t>(v);
    m_eliminated[vi] = true;
    std::vector<int> scope(m_neighbours[vi].begin(), m_neighbours[vi].end());
    std::vector<Factor*> factors;
    for (int id : m_factors_of[vi]) {
      Factor* f = m_factors[static_cast<std::size_t>(id)].get();
      if (f->alive) {
        factors.push_back(f);
        f->alive = false;
      }
    }
    m_factors_of[vi].clear();
    const int dv = m_p.domain[vi];
    double entries = 1;
    for (int u : scope) {
      entries *= m_p.domain[static_cast<std::size_t>(u)];
    }
    if (entries > m_o.max_table_entries) {
      std::vector<std::string> names;
      for (int u : scope) {
        names.push_back(fmt::format("{} ({} values)", vertex_name(m_p, u), m_p.domain[static_cast<std::size_t>(u)]));
      }
      throw Error(fmt::format("search: the space is too wide to search exactly here: eliminating {} needs a table "
                              "of {:.3g} entries (the limit is {:.3g}) over {}; use fewer devices, fewer "
                              "configurations or a bounded search (its plan's gap stated)",
                              vertex_name(m_p, v), entries, m_o.max_table_entries, fmt::join(names, ", ")));
    }
    m_stats.width = std::max(m_stats.width, static_cast<int>(scope.size()));
    m_stats.largest_table = std::max(m_stats.largest_table, entries);

    const std::size_t k = scope.size();
    // The order the step sums its factors in (run() sums them again so on the way back): those
    // that do not read the scope's last (fastest) vertex first, then those that do.
    // build() sums them in this order too: the one place the two kinds are told apart.
    std::vector<Factor*> ordered;
    std::size_t first_reading = 0; // ordered[first_reading ..] read the last vertex
    for (const bool reads_last : {false, true}) {
      for (Factor* f : factors) {
        const bool reads = k > 0 && std::find(f->scope.begin(), f->scope.end(), scope.back()) != f->scope.end();
        if (reads == reads_last) {
          ordered.push_back(f);
        }
      }
      if (!reads_last) {
        first_reading = ordered.size();
      }
    }
    Step step;
    step.vertex = v;
    step.factors.assign(ordered.begin(), ordered.end());
    // A step whose costs and factors are those of an earlier one, placed alike in its scope (the
    // same op of another repeated block, before any cost from outside the block has reached it),
    // builds the same table, sum for sum: it takes that table.
    const int sig = step_signature(v, scope, factors);
    const Done* done =
        m_options_reuse && static_cast<std::size_t>(sig) < m_done.size() && m_done[static_cast<std::size_t>(sig)].known
            ? &m_done[static_cast<std::size_t>(sig)]
            : nullptr;
    Buffer owned;
    const double* table = nullptr;
    if (done != nullptr) {
      table = done->table;
      ++m_stats_reused;
    } else {
      m_stats.work += entries * dv;
      owned = build(v, scope, std::move(ordered), first_reading, entries);
      table = owned.data();
    }
    // v leaves the graph: its neighbours become one another's (the new table joins them).
    for (int u : scope) {
      m_queue.erase({step_size(u), u});
      m_neighbours[static_cast<std::size_t>(u)].erase(v);
    }
    double constant = 0;
    if (k == 0) {
      constant = table[0];
    } else if (k == 1) {
      const auto target_vertex = static_cast<std::size_t>(scope[0]);
      auto& target = m_unary[target_vertex];
      for (std::size_t x = 0; x < target.size(); ++x) {
        target[x] += table[x];
      }
      m_unary_sig[target_vertex] = intern({4, m_unary_sig[target_vertex], sig});
    }
    if (done == nullptr) {
      remember(sig, k < 2 ? nullptr : table, owned, k);
    }
    if (k >= 2) {
      auto result = std::make_unique<Factor>();
      result->scope = scope;
      result->sig = sig;
      result->owned = std::move(owned);
      result->data = table;
      add_factor(std::move(result));
    } else {
      give_back(std::move(owned));
    }
    for (int u : scope) {
      m_queue.insert({step_size(u), u});
    }
    m_stats.peak_bytes = std::max(m_stats.peak_bytes, m_live_bytes);
    m_steps.push_back(std::move(step));
    return constant;
  }

  // The interned number of a key (a factor's or a vertex's costs, by how they were made).
  int intern(std::vector<std::int64_t> key) {
    return m_sigs.try_emplace(std::move(key), static_cast<int>(m_sigs.size())).first->second;
  }

  // What a step's table is made of: v's own costs and domain, the scope's domains, and each
  // factor (in the order given) with where each vertex of its scope stands in the step's scope.
  int step_signature(int v, const std::vector<int>& scope, const std::vector<Factor*>& factors) {
    std::vector<std::int64_t> key{3, m_unary_sig[static_cast<std::size_t>(v)], m_p.domain[static_cast<std::size_t>(v)],
                                  static_cast<std::int64_t>(scope.size())};
    for (int u : scope) {
      key.push_back(m_p.domain[static_cast<std::size_t>(u)]);
    }
    for (const Factor* f : factors) {
      key.push_back(f->sig);
      key.push_back(static_cast<std::int64_t>(f->scope.size()));
      for (int u : f->scope) {
        key.push_back(u == v ? -1 : std::lower_bound(scope.begin(), scope.end(), u) - scope.begin());
      }
    }
    return intern(std::move(key));
  }

  // A built table for later steps of the same signature (of one or no vertex: its values, kept).
  void remember(int sig, const double* table, const Buffer& small, std::size_t k) {
    if (!m_options_reuse) {
      return;
    }
    const auto i = static_cast<std::size_t>(sig);
    if (m_done.size() <= i) {
      m_done.resize(i + 1);
    }
    m_done[i].known = true;
    if (k < 2) {
      m_done[i].small.assign(small.begin(), small.end());
      m_done[i].table = m_done[i].small.data();
    } else {
      m_done[i].table = table;
    }
  }

  // The table of eliminating v: for every assignment of its scope, the least over v's values of
  // v's own costs plus its factors, given in the order they are summed: factors[0 .. first_fast)
  // do not read the scope's last vertex, the rest do.
  Buffer build(int v, const std::vector<int>& scope, std::vector<Factor*> factors, std::size_t first_fast,
               double entries) {
    const auto vi = static_cast<std::size_t>(v);
    const int dv = m_p.domain[vi];
    // Factors with v last: summing along v then reads consecutive entries (a factor with v
    // elsewhere would be read a row apart per value, a cache miss each).
    std::vector<std::unique_ptr<Factor>> transposed;
    for (auto& f : factors) {
      if (f->scope.back() != v) {
        transposed.push_back(with_last(*f, v));
        f = transposed.back().get();
      }
    }

    // Strides of every factor in the scope's odometer (along v, 1).
    const std::size_t k = scope.size();
    const std::size_t nf = factors.size();
    std::vector<std::vector<std::size_t>> stride(nf, std::vector<std::size_t>(k, 0));
    for (std::size_t f = 0; f < nf; ++f) {
      std::size_t s = 1;
      const auto& fs = factors[f]->scope;
      for (std::size_t j = fs.size(); j-- > 0;) {
        if (fs[j] != v) {
          const auto pos =
              static_cast<std::size_t>(std::lower_bound(scope.begin(), scope.end(), fs[j]) - scope.begin());
          stride[f][pos] = s;
        }
        s *= static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(fs[j])]);
      }
    }
    const auto n = static_cast<std::size_t>(entries);
    Buffer result = take(n); // every entry is written below
    const auto& unary = m_unary[vi];
    std::vector<std::size_t> counter(k, 0), base(nf, 0);
    // Factors that do not read the scope's last (fastest) vertex keep their rows while it runs
    // through its values: their sum with v's own costs (`slow`) is taken once per run of it, and
    // each entry adds only the factors that read it (`fast`, in their order).
    std::vector<std::size_t> fast, slow_factors;
    for (std::size_t f = 0; f < nf; ++f) {
      (f >= first_fast ? fast : slow_factors).push_back(f);
    }
    const auto dvs = static_cast<std::size_t>(dv);
    std::vector<double> sum(dvs), slow(dvs);
    // The entries run by rows: each assignment of the scope but its last vertex (none where the
    // scope has one vertex or none) has the same `slow` sums, and its entries along the last vertex
    // read the fast factors that far apart.
    const std::size_t run = k == 0 ? 1 : static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(scope[k - 1])]);
    std::vector<std::size_t> along(nf, 0); // each factor's step along the last vertex
    for (std::size_t f = 0; f < nf && k > 0; ++f) {
      along[f] = stride[f][k - 1];
    }
    // Polled every ~256K sums (a millisecond or so), however wide v's domain is.
    const std::size_t poll = std::max<std::size_t>(1, (std::size_t{1} << 18) / (dvs * (fast.size() + 1) * run));
    std::size_t until_poll = poll;
    // Where the one factor read along the last vertex does not read the one before it, two rows
    // that differ in that vertex alone read the same columns: they are taken together.
    const bool paired_rows = fast.size() == 1 && k >= 2 && stride[fast[0]][k - 2] == 0;
    std::vector<double> slow2(paired_rows ? dvs : 0);
    // Values of the last vertex whose columns of that factor are the same, entry for entry, whatever
    // the rest of the scope (an op's configurations that place the tensor alike, say) have the same
    // entries in every row: each class's first is summed (`firsts`), and the rest copy it.
    std::vector<std::size_t> firsts, class_of;
    if (fast.size() == 1 && k >= 1 && run >= 8) {
      std::size_t size = 1;
      for (const int u : factors[fast[0]]->scope) {
        size *= static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(u)]);
      }
      same_columns(*factors[fast[0]], size, along[fast[0]], run, dvs, firsts, class_of);
      if (firsts.size() * 5 > run * 4) { // too few alike to pay for the copies
        firsts.clear();
      }
    }
    std::vector<double> by_class(2 * firsts.size());
    const auto slow_sums = [&](std::vector<double>& into, std::size_t offset) { // offset: along vertex k-2
      std::copy(unary.begin(), unary.end(), into.begin());
      for (const std::size_t f : slow_factors) {
        const double* d = factors[f]->data + base[f] + offset * (k >= 2 ? stride[f][k - 2] : 0);
        for (std::size_t x = 0; x < dvs; ++x) { // v last: its values are consecutive
          into[x] += d[x];
        }
      }
    };
    // Advances the odometer over the scope but its last vertex, and every factor's offset with it.
    const auto next_row = [&] {
      for (std::size_t j = k > 0 ? k - 1 : 0; j-- > 0;) {
        ++counter[j];
        for (std::size_t f = 0; f < nf; ++f) {
          base[f] += stride[f][j];
        }
        if (counter[j] < static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(scope[j])])) {
          break;
        }
        for (std::size_t f = 0; f < nf; ++f) {
          base[f] -= stride[f][j] * counter[j];
        }
        counter[j] = 0;
      }
    };
    for (std::size_t row = 0; row * run < n;) {
      if (--until_poll == 0) {
        until_poll = poll;
        check_cancel();
      }
      slow_sums(slow, 0);
      const bool pair = paired_rows && counter[k - 2] + 1 <
                                           static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(scope[k - 2])]);
      if (pair) {
        slow_sums(slow2, 1);
      }
      // Only the least sum: which value of v has it is found again on the way back, for the one
      // entry that the choices of the scope make it read.
      double* out = result.data() + row * run;
      if (fast.empty()) {
        std::fill(out, out + run, least(slow.data(), dvs)); // k == 0: the one entry
      } else if (fast.size() == 1 && !firsts.empty()) {
        const double* d = factors[fast[0]]->data + base[fast[0]];
        const std::size_t step = along[fast[0]], classes = firsts.size();
        double* out2 = by_class.data() + classes;
        std::size_t i = 0;
        for (; i + 4 <= classes; i += 4) {
          const double* columns[4] = {d + firsts[i] * step, d + firsts[i + 1] * step, d + firsts[i + 2] * step,
                                      d + firsts[i + 3] * step};
          if (pair) {
            least_sums2x4(slow.data(), slow2.data(), columns, dvs, by_class.data() + i, out2 + i);
          } else {
            least_sums4(slow.data(), columns, dvs, by_class.data() + i);
          }
        }
        for (; i < classes; ++i) {
          by_class[i] = least_sum(slow.data(), d + firsts[i] * step, dvs);
          if (pair) {
            out2[i] = least_sum(slow2.data(), d + firsts[i] * step, dvs);
          }
        }
        for (std::size_t c = 0; c < run; ++c) {
          out[c] = by_class[class_of[c]];
        }
        if (pair) {
          for (std::size_t c = 0; c < run; ++c) {
            out[run + c] = out2[class_of[c]];
          }
        }
      } else if (fast.size() == 1) {
        const double* d = factors[fast[0]]->data + base[fast[0]];
        const std::size_t step = along[fast[0]];
        std::size_t c = 0;
        for (; c + 4 <= run; c += 4) {
          const double* columns[4] = {d + c * step, d + (c + 1) * step, d + (c + 2) * step, d + (c + 3) * step};
          if (pair) {
            least_sums2x4(slow.data(), slow2.data(), columns, dvs, out + c, out + run + c);
          } else {
            least_sums4(slow.data(), columns, dvs, out + c);
          }
        }
        for (; c < run; ++c) {
          out[c] = least_sum(slow.data(), d + c * step, dvs);
          if (pair) {
            out[run + c] = least_sum(slow2.data(), d + c * step, dvs);
          }
        }
      } else {
        for (std::size_t c = 0; c < run; ++c) {
          const double* d = factors[fast[0]]->data + base[fast[0]] + c * along[fast[0]];
          for (std::size_t x = 0; x < dvs; ++x) {
            sum[x] = slow[x] + d[x];
          }
          for (std::size_t i = 1; i + 1 < fast.size(); ++i) {
            const double* e = factors[fast[i]]->data + base[fast[i]] + c * along[fast[i]];
            for (std::size_t x = 0; x < dvs; ++x) {
              sum[x] += e[x];
            }
          }
          out[c] = least_sum(sum.data(), factors[fast.back()]->data + base[fast.back()] + c * along[fast.back()], dvs);
        }
      }
      next_row();
      row += 1;
      if (pair) {
        next_row();
        row += 1;
      }
    }
    // The consumed factors stay for the way back (a table's least is looked up there again).
    double transposed_bytes = 0;
    for (const auto& t : transposed) {
      transposed_bytes += static_cast<double>(t->owned.size()) * sizeof(double);
    }
    m_stats.peak_bytes =
        std::max(m_stats.peak_bytes, m_live_bytes + transposed_bytes + static_cast<double>(n) * sizeof(double));
    for (auto& t : transposed) {
      give_back(std::move(t->owned));
    }
    return result;
  }

  const Problem& m_p;
  const Options& m_o;
  std::size_t m_n;
  std::vector<std::vector<double>> m_unary;
  std::vector<std::unique_ptr<Factor>> m_factors;
  std::vector<std::vector<int>> m_factors_of;
  std::vector<std::set<int>> m_neighbours;
  std::vector<bool> m_eliminated;
  std::set<std::pair<double, int>> m_queue;
  std::vector<Step> m_steps;
  Stats m_stats;
  double m_live_bytes = 0; // every table built so far (they stay for the way back)
  double m_constant = 0;   // edges between vertices of one value
  // Signatures (how each table was made) and the tables built per signature, for repeated steps.
  bool m_options_reuse = true;
  std::map<std::vector<std::int64_t>, int> m_sigs;
  std::vector<std::int64_t> m_unary_sig; // per vertex: its costs' signature, as steps add to them
  struct Done {
    bool known = false;
    const double* table = nullptr;
    std::vector<double> small; // a table of no or one vertex, kept here (it is not a factor)
  };
  std::vector<Done> m_done; // by signature
  int m_stats_reused = 0;
};

} // namespace

// Eliminates the graph alone (no tables): its steps come in the same order as Eliminator's.
double widest_table(const Problem& p) {
  const std::size_t n = p.domain.size();
  std::vector<std::set<int>> neighbours(n);
  for (const auto& e : p.edges) {
    if (p.domain[static_cast<std::size_t>(e.u)] > 1 && p.domain[static_cast<std::size_t>(e.v)] > 1) {
      neighbours[static_cast<std::size_t>(e.u)].insert(e.v);
      neighbours[static_cast<std::size_t>(e.v)].insert(e.u);
    }
  }
  const auto table = [&](int v) {
    double size = 1;
    for (const int u : neighbours[static_cast<std::size_t>(v)]) {
      size *= p.domain[static_cast<std::size_t>(u)];
    }
    return size;
  };
  const auto step_size = [&](int v) { return table(v) * p.domain[static_cast<std::size_t>(v)]; };
  std::set<std::pair<double, int>> queue;
  for (std::size_t v = 0; v < n; ++v) {
    queue.insert({step_size(static_cast<int>(v)), static_cast<int>(v)});
  }
  double widest = 0;
  while (!queue.empty()) {
    const int v = queue.begin()->second;
    queue.erase(queue.begin());
    widest = std::max(widest, table(v));
    const auto scope = std::move(neighbours[static_cast<std::size_t>(v)]);
    for (const int u : scope) {
      queue.erase({step_size(u), u});
    }
    for (const int u : scope) {
      auto& of_u = neighbours[static_cast<std::size_t>(u)];
      of_u.erase(v);
      for (const int w : scope) {
        if (w != u) {
          of_u.insert(w);
        }
      }
    }
    for (const int u : scope) {
      queue.insert({step_size(u), u});
    }
  }
  return widest;
}

Solution solve(const Problem& problem, const Options& options) {
  detail::validate(problem);
  if (options.bounded_table_entries > 0) {
    const double widest = widest_table(problem);
    if (widest > options.max_table_entries) {
      // Tables of a thousand entries first, ten times larger each time up to the bound asked, while
      // the plan is more than 0.1% above the bound: the best plan and the best bound of every
      // solve (each bound holds), most often found long before the largest tables.
      Solution best;
      double lower = 0;
      for (double entries = std::min(1e3, options.bounded_table_entries);;
           entries = std::min(entries * 10, options.bounded_table_entries)) {
        auto s = solve_bounded(problem, entries, options);
        lower = std::max(lower, s.lower_bound);
        if (best.choice.empty() || s.cost < best.cost) {
          best = std::move(s);
        }
        if (best.exact || best.cost <= lower * (1 + 1e-3) || entries >= options.bounded_table_entries) {
          break;
        }
      }
      best.lower_bound = best.exact ? best.cost : std::min(lower, best.cost);
      best.stats.too_wide_table = widest;
      return best;
    }
  }
  Eliminator e(problem, options);
  auto s = e.run();
  s.lower_bound = s.cost;
  return s;
}

double total_cost(const Problem& p, std::span<const int> choice) {
  if (choice.size() != p.domain.size()) {
    throw Error(fmt::format("search problem: {} choices for {} vertices", choice.size(), p.domain.size()));
  }
  double cost = 0;
  for (std::size_t v = 0; v < p.domain.size(); ++v) {
    if (choice[v] < 0 || choice[v] >= p.domain[v]) {
      throw Error(fmt::format("search problem: {} has no value {}", vertex_name(p, static_cast<int>(v)), choice[v]));
    }
    if (p.unary[v] >= 0) {
      cost += p.tables[static_cast<std::size_t>(p.unary[v])][static_cast<std::size_t>(choice[v])];
    }
  }
  for (const auto& e : p.edges) {
    const auto u = static_cast<std::size_t>(choice[static_cast<std::size_t>(e.u)]);
    const auto w = static_cast<std::size_t>(choice[static_cast<std::size_t>(e.v)]);
    cost += p.tables[static_cast<std::size_t>(e.table)]
                    [u * static_cast<std::size_t>(p.domain[static_cast<std::size_t>(e.v)]) + w];
  }
  return cost;
}

Solution brute_force(const Problem& p) {
  detail::validate(p);
  double combinations = 1;
  for (int d : p.domain) {
    combinations *= d;
  }
  if (combinations > 2e7) {
    throw Error(fmt::format("brute force: {:.3g} assignments is too many to try", combinations));
  }
  Solution best;
  best.cost = infinity;
  std::vector<int> choice(p.domain.size(), 0);
  while (true) {
    const double c = total_cost(p, choice);
    if (c < best.cost) {
      best.cost = c;
      best.choice = choice;
    }
    std::size_t j = 0;
    for (; j < choice.size(); ++j) {
      if (++choice[j] < p.domain[j]) {
        break;
      }
      choice[j] = 0;
    }
    if (j == choice.size()) {
      break;
    }
  }
  best.lower_bound = best.cost;
  return best;
}

} // namespace partita::search::dp
