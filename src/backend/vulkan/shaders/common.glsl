// Shared by every forge compute shader. Conventions:
//  - every buffer binding comes with an element offset in the push constants (a tensor view
//    bound at an offset rounded down to minStorageBufferOffsetAlignment; the remainder is
//    added here);
//  - large 1-D launches are split over gl_NumWorkGroups.x * y (maxComputeWorkGroupCount), so
//    the flat workgroup index is y * nx + x.
#ifndef FORGE_COMMON_GLSL
#define FORGE_COMMON_GLSL

uint flat_group() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

// One invocation per element, 256 per workgroup.
uint flat_index() { return flat_group() * 256u + gl_LocalInvocationID.x; }

#endif
