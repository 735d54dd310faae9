// The function app's user-assigned identity. It lives in its own module so its principal id
// exists before the site does: role assignments are granted first, and the identity (with its
// grants) survives deleting and recreating the function app.
param name string
param location string
param tags object = {}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output name string = identity.name
output principalId string = identity.properties.principalId
output clientId string = identity.properties.clientId
