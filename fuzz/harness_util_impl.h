// expect_only_forge_errors (harness_util.h): a template, so defined in a header.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "forge/error.h"

namespace forge::fuzz {

template <class Fn>
void expect_only_forge_errors(Fn&& fn) {
  try {
    fn();
  } catch (const forge::Error&) {
    // The documented answer to malformed input.
  } catch (const std::bad_alloc&) {
    fail("std::bad_alloc escaped: an allocation was not bounded by the input's size");
  } catch (const std::exception& e) {
    fail(std::string("a non-forge exception escaped: ") + e.what());
  } catch (...) {
    fail("an exception of unknown type escaped");
  }
}

}  // namespace forge::fuzz
