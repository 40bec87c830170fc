// Internal error type: every layer below src/api reports failure by throwing
// ssu::Error; the API layer turns it into a status and the thread's message.
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

#include "ssu.h"

namespace ssu {

class Error : public std::exception {
 public:
  Error(ssu_status_t status, std::string message)
      : status_(status), message_(std::move(message)) {}
  ssu_status_t status() const noexcept { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  ssu_status_t status_;
  std::string message_;
};

// printf-style message formatting.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Throws Error(status, formatted message).
[[noreturn]] void fail(ssu_status_t status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

}  // namespace ssu
