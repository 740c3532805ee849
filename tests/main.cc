// The test binary's entry point: GoogleTest's, and one exit status more. ctest runs one
// process per suite (cmake/gtest_suites.cmake); a suite whose tests all skipped (no GPU, a
// data set not installed) exits 77, which ctest reports as "Skipped" rather than as a pass
// that checked nothing. Any failure still exits 1, whatever else skipped. Under mpirun (the
// Mpi* suites), ranks other than 0 print only their failures, so that the log reads as one
// rank's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  // Before InitGoogleTest, which picks the printer (and lets --gtest_brief=0 override).
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = std::getenv("PMIX_RANK");
  if (rank && std::strcmp(rank, "0") != 0) GTEST_FLAG_SET(brief, true);
  testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const testing::UnitTest& run = *testing::UnitTest::GetInstance();
  if (status == 0 && run.test_to_run_count() > 0 && run.successful_test_count() == 0 &&
      run.skipped_test_count() == run.test_to_run_count())
    return 77;
  return status;
}
