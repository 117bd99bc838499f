// The plans ge2_gemm_bias_act compiled, keyed by parameter block, least
// recently used evicted first. Not thread-safe: the context's mutex guards it.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "exec/plan.hpp"

namespace ge2 {

class OneShotCache {
 public:
  explicit OneShotCache(std::size_t capacity) : capacity_(capacity) {}

  // The cached plan for `key` (now the most recently used), or nullptr.
  std::shared_ptr<Plan> find(const std::string& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  // Keeps `plan` under `key`, evicting the least recently used plan when full.
  // A plan still executing elsewhere lives on through its shared_ptr.
  void insert(const std::string& key, std::shared_ptr<Plan> plan) {
    if (capacity_ == 0) return;
    if (order_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evictions_;
    }
    order_.emplace_front(key, std::move(plan));
    index_[key] = order_.begin();
  }

  std::size_t size() const { return order_.size(); }
  std::size_t capacity() const { return capacity_; }
  std::size_t hits() const { return hits_; }
  std::size_t misses() const { return misses_; }
  std::size_t evictions() const { return evictions_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<Plan>>;
  std::size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::size_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace ge2
